"""Embedders: the packaged MiniLM, the checkpoint's hidden states and the cache (`models`), the static model
distilled from MiniLM (`static`), and the one choice among them for each use (`choice`)."""
