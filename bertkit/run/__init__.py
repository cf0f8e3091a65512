"""The run layer: the one place that opens, locks, writes and reads run directories (and the durable file
primitives every other writer uses). Submodules are imported directly; this package re-exports nothing so that
`bertkit.run.files` stays free of torch imports for text/ and index code."""
