"""What the `lopti` commands do: settings, `lopti train` runs (checkpoints, resume), `lopti eval`, `lopti compare`."""
