"""Lightning task modules (thin: loss, metrics, optimiser, predict_step)."""
