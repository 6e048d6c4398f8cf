"""The planted error-type suite: corpora, planting mechanisms, methods and scores (benchmarks/clustering_quality.py
and benchmarks/label_issues.py drive it)."""
