"""Training: one trainer base (`base`: model + control tokens + LoRA, schedule, resume, save)
and one config + trainer per stage on it (`sft`: Pasta-SFT / Baseline-SFT), with the batches
(`collator`), rows (`data`), losses, callbacks and plots they share."""
