"""Model provisioning: 🤗 folders and hub ids, the embedded models and their cache (the tiny K&K models are built by
lopti.tasks.kk.tiny and warm-started by lopti.tasks.kk.warmstart)."""
