"""Inputs, read once at the edge: eval sets and predictions as tables (`table`), their gold (`gold`), token
sequences (`tokens`), chat messages (`messages`), Parquet read in blocks by workers (`blocks`), and the files other
tools write for `analyze --task generation` (`generations`: lm-eval, Inspect, chat JSONL, vLLM and OpenAI dumps)."""
