"""The LightningModule and LightningDataModule of examples/lightning (the ``_target_`` of its configs)."""
