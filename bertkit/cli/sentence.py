"""`bertkit evaluate-sts`, `embed`, `similarity`, `index build|add|info`, `search`: sentence embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from bertkit.cli.common import PrecisionOption, ProgressOption, TextFieldOption, app, given_texts, user_errors


@app.command("evaluate-sts")
@user_errors
def evaluate_sts(model: Annotated[Path, typer.Option(
        "--model", "-m", help="Any encoder run directory (or its ONNX export folder).")],
                 data: Annotated[Path, typer.Option("--data", help="Scored pairs: the STS benchmark's sts-*.csv, or "
                                                                  "a file with sentence1 / sentence2 / score "
                                                                  "(or label) columns or JSONL keys.")],
                 sentence1_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 sentence2_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 score_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 max_score: Annotated[float, typer.Option(help="Top of the gold score scale.")] = 5.0,
                 batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 64,
                 out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the result as JSON.")]
                 = None,
                 precision: PrecisionOption = "auto",
                 overwrite: Annotated[bool, typer.Option(help="Replace an existing --out STS report bertkit "
                                                                      "wrote.")] = False) -> None:
    """Spearman / Pearson correlation of cosine similarities with gold scores (STS benchmark style)."""
    from bertkit.jobs import sts as job

    job.run(job.StsJob(model, data, sentence1_column, sentence2_column, score_column, max_score, batch_size, out,
                       overwrite, precision=precision))


@app.command()
@user_errors
def embed(model: Annotated[Path, typer.Option(
        "--model", "-m", help="Any encoder run directory (or its ONNX export folder).")],
          inputs: Annotated[list[str], typer.Argument(metavar="INPUT...", help="Text files (.txt one per line, "
                                                      ".gz, .jsonl, .csv, .tsv, .parquet) or directories.")],
          out: Annotated[Path, typer.Option("--out", "-o", help="OUT.npy (the matrix) or OUT.parquet (file, line, "
                                                                "\\[id,] embedding).")],
          text_field: TextFieldOption = None,
          id_field: Annotated[str | None, typer.Option(help="A JSONL field / column with unique ids (written to "
                                                            "Parquet output).")] = None,
          batch_size: Annotated[int, typer.Option(min=1, help="Texts per batch (batches sorted by length).")] = 64,
          chunk_size: Annotated[int, typer.Option(min=1, help="Texts read, embedded and written at a time (memory "
                                                              "stays constant).")] = 8192,
          keep_empty: Annotated[bool, typer.Option(help="Embed empty lines as \"\" instead of skipping them.")]
          = False,
          overwrite: Annotated[bool, typer.Option(help="Replace an existing OUT that is embeddings bertkit "
                                                        "wrote.")] = False,
          layers: Annotated[str | None, typer.Option(
              help="Per-layer vectors: 'all' or layer numbers such as 0,3,-1 (0 = the embeddings output, -1 = the "
                   "last layer); OUT.npy becomes (texts, layers, D), each layer pooled and normalised like the "
                   "run's embeddings.")] = None,
          tokens: Annotated[bool, typer.Option(
              help="Every token's states instead of one pooled vector per text (the last layer unless --layers): "
                   "OUT.npy is (tokens, layers, D) and OUT.tokens.tsv names each row's text, position and "
                   "token.")] = False,
          precision: PrecisionOption = "auto",
          compile: Annotated[bool, typer.Option(help="Run the encoder through torch.compile. Off by default: "
                                                     "measured 0.94x eager on a 2-core CPU.")]
          = False,
          compile_shapes: Annotated[Literal["auto", "buckets", "dynamic"], typer.Option(
              help="With --compile: 'dynamic' (one graph for every batch shape), 'buckets' (a few static graphs: "
                   "batches padded to power-of-two rows and widths, up to ~2x the tokens) or 'auto' (buckets on a "
                   "GPU, where the dynamic graph's compile stalled; dynamic elsewhere).")] = "auto",
          progress: ProgressOption = True) -> None:
    """Embed sentences (one vector per text, the run's pooling and normalisation) into .npy or .parquet; with
    --layers / --tokens, per-layer or per-token representations for your own analyses."""
    from bertkit.jobs import embed as job

    job.run(job.EmbedJob(model, tuple(inputs), out, text_field or "text", id_field, batch_size, chunk_size, keep_empty,
                         overwrite, layers=layers, tokens=tokens, precision=precision, compile=compile,
                         progress=progress, compile_shapes=compile_shapes))


@app.command()
@user_errors
def similarity(model: Annotated[Path, typer.Argument(
        help="Any encoder run directory (or its ONNX export folder).")],
               a: Annotated[str, typer.Argument(help="First sentence.")],
               b: Annotated[str, typer.Argument(help="Second sentence.")],
               precision: PrecisionOption = "auto") -> None:
    """Cosine similarity of two sentences' embeddings."""
    from bertkit.jobs import search as job

    typer.echo(f"{job.similarity(job.SimilarityJob(model, a, b, precision)).cosine:.4f}")


SHOWN = 300  # characters of a hit's text the human-readable view shows (--json has it whole)


def _shown(text: str) -> str:
    """A hit's text for the terminal: one line, cut at SHOWN characters (a long document would fill the screen)."""
    line = " ".join(text.split())
    return line if len(line) <= SHOWN else line[:SHOWN - 1].rstrip() + "…"


index_app = typer.Typer(help="Build, extend and inspect sentence-embedding indexes for `bertkit search`.",
                        no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("build")
@user_errors
def index_build(model: Annotated[Path, typer.Option("--model", "-m", help="The encoder run that embeds the corpus "
                                                                          "(and, later, the queries).")],
                corpus: Annotated[list[str], typer.Argument(help="Corpus files or directories, one text per "
                                                                 "line / record.")],
                out: Annotated[Path, typer.Option("--out", "-o", help="The index directory to write.")],
                backend: Annotated[str, typer.Option(help="auto (exact below 300,000 vectors, FAISS IVF from "
                                                          "there) | exact | faiss.")] = "auto",
                text_field: TextFieldOption = None,
                id_field: Annotated[str | None, typer.Option(help="Field / column with unique document ids "
                                                                  "(default: file:line).")] = None,
                nlist: Annotated[int | None, typer.Option(help="FAISS: inverted lists (default ~4 sqrt(N)).")]
                = None,
                nprobe: Annotated[int | None, typer.Option(help="FAISS: lists searched per query (default: a "
                                                                "16th of the lists; recall@10 0.93-0.97).")] = None,
                batch_size: Annotated[int, typer.Option(min=1, help="Texts per batch.")] = 64,
                overwrite: Annotated[bool, typer.Option(help="Replace an existing index (never anything "
                                                             "else).")] = False,
                precision: PrecisionOption = "auto",
                progress: ProgressOption = True,
                vectors: Annotated[str, typer.Option(help="How the index stores the vectors: float32 (4 bytes a "
                                                          "dimension) | int8 (1 byte: DCT-turned coordinates, "
                                                          "ranges calibrated on the corpus; scored by the float "
                                                          "query) | "
                                                          "binary (1 bit; Hamming candidates rescored by the float "
                                                          "query).")]
                = "float32",
                refine: Annotated[str | None, typer.Option(help="int8 or binary vectors: also keep each vector "
                                                                "finer on disk, float32 (for int8 or binary) or "
                                                                "int8 (for binary), read only for the --rescore x k "
                                                                "candidates a search ranks by it: memory stays the "
                                                                "codes', recall nears float search.")] = None
                ) -> None:
    """Embed a corpus into a new index (written atomically)."""
    from bertkit.jobs import search as job

    job.build(job.IndexBuildJob(model, tuple(corpus), out, text_field or "text", id_field, backend, nlist, nprobe,
                                batch_size, overwrite=overwrite, precision=precision, progress=progress,
                                vectors=vectors, refine=refine))


IndexPrecisionOption = Annotated[Optional[Literal["auto", "fp32", "bf16"]], typer.Option(
    help="Embedding precision (auto: bf16 where the device computes it natively, else fp32); default: the one the "
         "index was built in, so its vectors stay comparable.")]


@index_app.command("add")
@user_errors
def index_add(index: Annotated[Path, typer.Argument(help="An index directory.")],
              corpus: Annotated[list[str], typer.Argument(help="Corpus files or directories to append.")],
              model: Annotated[Path | None, typer.Option("--model", "-m", help="The index's model, if it moved "
                                                                               "(must embed identically).")] = None,
              text_field: TextFieldOption = None,
              id_field: Annotated[str | None, typer.Option(help="Field / column with unique ids.")] = None,
              precision: IndexPrecisionOption = None,
              progress: ProgressOption = True) -> None:
    """Append texts to an index (ids must be new; the index is replaced in one rename)."""
    from bertkit.jobs import search as job

    job.add(job.IndexAddJob(index, tuple(corpus), model, text_field or "text", id_field, progress=progress,
                            precision=precision))


@index_app.command("info")
@user_errors
def index_info(index: Annotated[Path, typer.Argument(help="An index directory.")],
               json_out: Annotated[bool, typer.Option("--json", help="The same as one JSON object (every field "
                                                                   "index.json records for the model).")] = False
               ) -> None:
    """What an index holds: vectors, dimension, backend, model (every file is checked)."""
    from bertkit.jobs import search as job
    from bertkit.run.files import to_json

    result = job.info(job.IndexInfoJob(index))
    if not json_out:
        typer.echo(_described(result))
        return
    # the report names FAISS settings only for a FAISS index (no "faiss": null for an exact one), as it always has,
    # and a refine copy only for an index that keeps one
    optional = ("faiss", "refine", "refine_bytes_per_vector")
    typer.echo(to_json({name: value for name, value in vars(result).items() if name not in optional or value}))


def _described(info) -> str:
    """`index info`'s lines for a reader: what is stored, how it is searched, and the model that embeds queries."""
    shards = f"{info.shards:,} shard{'s' if info.shards != 1 else ''}"
    lines = [f"{info.path}: {info.count:,} × {info.dim} {info.vectors} vectors ({info.bytes_per_vector:,} bytes "
             f"each, {shards})"]
    if info.refine:
        article = "an" if info.refine.startswith("int") else "a"
        lines.append(f"  rescored by {article} {info.refine} copy on disk ({info.refine_bytes_per_vector:,} bytes "
                     "each)")
    if info.faiss:
        lines.append(f"  search: FAISS IVF, {info.faiss.get('nlist', '?')} lists, {info.faiss.get('nprobe', '?')} "
                     "probed per query (--nprobe changes it; --exact scores every vector)")
    else:
        lines.append("  search: exact (every vector scored)")
    model = info.model
    said = [f"{model.get('pooling', '?')} pooling", "normalised" if model.get("normalize") else "not normalised"]
    said += [f"max length {model['max_length']}"] if model.get("max_length") else []
    said += [f"embedded in {model['precision']}"] if model.get("precision") else []
    lines.append(f"  model: {model.get('path', '?')} ({', '.join(said)})")
    return "\n".join(lines)


@app.command()
@user_errors
def search(index: Annotated[Path, typer.Argument(help="An index directory from `bertkit index build`.")],
           queries: Annotated[list[str] | None, typer.Argument(metavar="QUERY...", help="Text(s) to search for "
                                                                "(or --input).")] = None,
           input_file: Annotated[Path | None, typer.Option("--input", "-i", help="A file of queries, one per line "
                                                           "(- for stdin; blank lines are skipped).")] = None,
           k: Annotated[int, typer.Option("-k", "--top-k", help="Results per query.")] = 5,
           model: Annotated[Path | None, typer.Option("--model", "-m", help="The index's model, if it moved.")]
           = None,
           exact: Annotated[bool | None, typer.Option("--exact/--approximate", help="Score every stored vector "
                                                      "(or probe the FAISS index); default: the index's "
                                                      "backend.")] = None,
           nprobe: Annotated[int | None, typer.Option(help="FAISS: lists searched per query (default: the "
                                                                  "index's).")] = None,
           truncate: Annotated[bool, typer.Option(help="Search with the first sentence.max_seq_length tokens "
                                                       "of a longer query instead of refusing it.")] = False,
           precision: IndexPrecisionOption = None,
           json_out: Annotated[bool, typer.Option("--json", help="One JSON line per query, each hit's text "
                                                               "whole (the table shows 300 characters).")] = False,
           rescore: Annotated[int | None, typer.Option(help="Binary indexes, and any with a --refine copy: "
                                                            "candidates per result, found by the codes and "
                                                            "rescored by the float query (default 4; 64 for a "
                                                            "binary index with a --refine copy).")] = None
           ) -> None:
    """The k most similar documents of an index for each query (cosine similarity)."""
    from bertkit.jobs import search as job
    from bertkit.run.files import to_json

    queries = given_texts(queries, input_file, "query", skip_blank=True)
    result = job.search(job.SearchJob(index, tuple(queries), k, model, exact, nprobe, truncate, precision,
                                      rescore))
    for query, hits in zip(result.queries, result.hits):
        if json_out:
            typer.echo(to_json({"query": query, "hits": [h.__dict__ for h in hits]}, indent=None))
            continue
        typer.echo(f"{query}")
        for rank, hit in enumerate(hits, start=1):
            typer.echo(f"  {rank:2d}. {hit.score:.3f}  [{hit.id}]  {_shown(hit.text)}")
