"""`bertkit attention`: heatmaps of attention weights (the eager attention path returns them), tokens on the axes.

One PNG per (stack, kind, layer) with a panel per head and one for the heads' mean, or one panel with
`--head`. An encoder-decoder also gets `alignment.png`: the last decoder layer's cross-attention averaged over
heads — which source tokens each output token reads, the alignment picture of attention-based translation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.run.directory import load_run
from bertkit.run.files import atomic_dir
from bertkit.run.outputs import ATTENTION, claim
from bertkit.text.tokenizer import check_vocab_matches, load_run_tokenizer, special_ids
from bertkit.translation import PairTokenizers, Translator


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable axis labels: each token's own text (byte-level pieces decoded, the leading space shown as ·)."""
    labels = []
    for i in ids:
        token = tokenizer.id_to_token(i) or "?"
        if token.startswith("[") and token.endswith("]"):
            labels.append(token)
            continue
        text = tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" in text and "\ufffd" not in token and all(c in BYTE_OF_SYMBOL for c in token):
            # a piece of a character (an emoji is 4 bytes, often 2–4 tokens): its bytes, where "�" said nothing
            pieces = [BYTE_OF_SYMBOL[c] for c in token]
            space = "·" if pieces[0] == 0x20 else ""
            labels.append(space + "<" + " ".join(f"{b:02x}" for b in pieces[len(space):]) + ">")
            continue
        labels.append(text.replace(" ", "·").replace("\n", "\\n") or token)
    return labels


def _byte_of_symbol() -> dict[str, int]:
    """A byte-level BPE's alphabet (GPT-2's, which HF tokenizers' ByteLevel uses) reversed: the character a token
    writes for each byte → that byte. Printable Latin-1 bytes stand for themselves, the others for 256 + n."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}


BYTE_OF_SYMBOL = _byte_of_symbol()


@torch.no_grad()
def collect(run: Path, text: str, target: str | None = None) -> dict:
    """Attention weights of one input: {"maps": [(stack, kind, layer, weights (H, Tq, Tk), q_labels, k_labels)],
    "architecture": …, "output": translation or None}."""
    if not text.strip():
        raise BertkitError("the text is empty")
    config, model = load_run(run)
    arch = config.model.architecture
    maps = []
    if arch == "encoder-decoder":
        tokenizers = PairTokenizers.load(run)
        for side in (tokenizers.source, tokenizers.target):
            check_vocab_matches(side, config.model.vocab_size, run)
        translator = Translator(run, model=model, tokenizers=tokenizers)
        source, _ = tokenizers.encode_source([text], model.config.max_len)
        if target is None:
            output_ids = translator.translate_ids(source)[0]
            target = tokenizers.decode(output_ids)
        else:
            output_ids = tokenizers.encode_target([target], model.config.max_len)[0][0][:-1]
        special = tokenizers.special
        decoder_in = [special.cls] + output_ids[:model.config.max_len - 1]
        src = torch.tensor([source[0]])
        enc = model.backbone.encode(src, output_attentions=True)
        dec = model.backbone.decoder(torch.tensor([decoder_in]), memory=enc.last_hidden_state,
                                     output_attentions=True)
        src_labels = token_labels(tokenizers.source, source[0])
        out_labels = token_labels(tokenizers.target, decoder_in)
        for layer, weights in enumerate(enc.attentions):
            maps.append(("encoder", "self", layer, weights["self"][0], src_labels, src_labels))
        for layer, weights in enumerate(dec.attentions):
            maps.append(("decoder", "self", layer, weights["self"][0], out_labels, out_labels))
            maps.append(("decoder", "cross", layer, weights["cross"][0], out_labels, src_labels))
        return {"maps": maps, "architecture": arch, "output": target}
    if target is not None:
        raise BertkitError("--target is for encoder-decoder runs (the output to align with the source)")
    tokenizer = load_run_tokenizer(run, config)
    if arch == "decoder":
        ids = [special_ids(tokenizer).cls] + tokenizer.encode(text, add_special_tokens=False).ids
    else:
        ids = tokenizer.encode(text).ids  # [CLS] text [SEP], as in finetuning and embedding
    if len(ids) > model.config.max_len:
        raise BertkitError(f"the text has {len(ids)} tokens, more than the model's max_len={model.config.max_len}")
    out = model.backbone(torch.tensor([ids]), output_attentions=True)
    labels = token_labels(tokenizer, ids)
    for layer, weights in enumerate(out.attentions):
        maps.append((arch, "self", layer, weights["self"][0], labels, labels))
    return {"maps": maps, "architecture": arch, "output": None}


def _heatmap(ax, weights: torch.Tensor, q_labels: list[str], k_labels: list[str], title: str):
    """One panel on the scale every panel shares, 0 to 1 (a row of attention weights sums to 1): scaled to each
    panel's own maximum, near-uniform attention (1/12 everywhere) drew as bright as a sharp head. Returns the
    image, for the figure's colour bar."""
    image = ax.imshow(weights.float().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_title(title, fontsize=9)
    small = 7 if max(len(q_labels), len(k_labels)) <= 30 else 5
    ax.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=small)
    ax.set_yticks(range(len(q_labels)), q_labels, fontsize=small)
    return image


@dataclass(frozen=True)
class AttentionJob:
    """What `bertkit attention` is asked: a run, the input text (the source, for an encoder-decoder), the directory
    for the PNGs, one layer and/or one head to draw (None: all, and the heads' mean), the output to align with
    (encoder-decoder only; None: the model's greedy translation), and whether a non-empty `out` may be replaced."""

    run: Path
    text: str
    out: Path
    layer: int | None = None
    head: int | None = None
    target: str | None = None
    overwrite: bool = False


@dataclass(frozen=True)
class AttentionResult:
    """The PNG files written, in the order drawn (alignment.png last, for an encoder-decoder)."""

    files: list[Path]


def run(job: AttentionJob) -> AttentionResult:
    """Write the heatmaps into `job.out` (atomically: an existing directory is replaced only with --overwrite)."""
    out, layer, head, overwrite = Path(job.out), job.layer, job.head, job.overwrite
    claim(out, ATTENTION, overwrite, inputs=(job.run,))
    found = collect(job.run, job.text, job.target)
    maps = found["maps"]
    n_layers = max(m[2] for m in maps) + 1
    n_heads = maps[0][3].shape[0]
    if layer is not None and not 0 <= layer < n_layers:
        raise BertkitError(f"--layer {layer}: the model has layers 0..{n_layers - 1}")
    if head is not None and not 0 <= head < n_heads:
        raise BertkitError(f"--head {head}: the model has heads 0..{n_heads - 1}")

    # a Figure of its own, not pyplot's: files only, never a window, and the caller's backend (a notebook's inline
    # one) left as it was (matplotlib.use("Agg") switched it for the whole process)
    from matplotlib.figure import Figure

    written = []
    with atomic_dir(out, overwrite=overwrite) as tmp:
        for stack, kind, index, weights, q_labels, k_labels in maps:
            if layer is not None and index != layer:
                continue
            panels = [(f"head {head}", weights[head])] if head is not None else \
                [(f"head {h}", weights[h]) for h in range(n_heads)] + [("mean of heads", weights.mean(0))]
            cols = min(len(panels), 3)
            rows = math.ceil(len(panels) / cols)
            size = max(3.0, 0.22 * max(len(q_labels), len(k_labels)) + 1.5)
            fig = Figure(figsize=(size * cols, size * rows), layout="constrained")
            axes = fig.subplots(rows, cols, squeeze=False)
            for ax, (title, w) in zip(axes.flat, panels):
                image = _heatmap(ax, w, q_labels, k_labels, title)
            for ax in list(axes.flat)[len(panels):]:
                ax.axis("off")
            fig.colorbar(image, ax=list(axes.flat)[:len(panels)], shrink=0.6, label="attention weight")
            fig.suptitle(f"{stack} {kind}-attention, layer {index}  (rows: queries, columns: keys)")
            name = f"{stack}-{kind}-layer{index}" + (f"-head{head}" if head is not None else "") + ".png"
            fig.savefig(tmp / name, dpi=110, bbox_inches="tight")  # a one-panel figure clipped its long title
            written.append(out / name)
        if found["architecture"] == "encoder-decoder":
            cross = [m for m in maps if m[1] == "cross"]
            stack, kind, index, weights, q_labels, k_labels = cross[min(layer, len(cross) - 1)
                                                                    if layer is not None else -1]
            w = weights[head] if head is not None else weights.mean(0)
            # about 0.3 in a token each way, at most 40 in (a long output over a short source was 5,209 x 51,857
            # pixels, more than Pillow opens)
            width, height = (min(40.0, max(4.0, 0.3 * n + 2)) for n in (len(k_labels), len(q_labels)))
            fig = Figure(figsize=(width, height), layout="constrained")
            ax = fig.subplots()
            image = _heatmap(ax, w, q_labels, k_labels, f"cross-attention, decoder layer {index}, "
                             + (f"head {head}" if head is not None else "mean of heads"))
            ax.set_xlabel("source tokens")
            ax.set_ylabel("output tokens (each row predicts the next)")
            fig.colorbar(image, ax=ax, shrink=0.6, label="attention weight")
            fig.savefig(tmp / "alignment.png", dpi=130, bbox_inches="tight")
            written.append(out / "alignment.png")
    return AttentionResult(written)
