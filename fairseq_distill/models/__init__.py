"""Model architectures (deep pre-norm Transformer, flexible depth) are added by later work."""
