"""The torch engine: the model's own weights in PyTorch, and the forward steps every runtime
drives on it (a KV pool written in place, masks from the one `structure()`, paged KV for TIP)."""
