"""Model provisioning: 🤗 folders and hub ids, the embedded models and their cache, the tiny model, warm start."""
