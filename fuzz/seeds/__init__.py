"""fuzz/seeds — the seed writers of make_seeds.py, one module per fuzz target (or family of targets); encoder.py
holds the byte layout they share."""
