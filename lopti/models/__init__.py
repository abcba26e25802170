"""Model provisioning: 🤗 folders and hub ids, the embedded models and their cache (a task's own models are built
and warm-started by the code its `TaskModels` record names)."""
