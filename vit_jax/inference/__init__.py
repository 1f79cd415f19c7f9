"""Model from a checkpoint, image files, class names, top-k, the paper's figures, training curves."""
