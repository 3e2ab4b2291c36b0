"""llama.cpp as a second decoding engine: GGUF export, the binding, its forward step."""
