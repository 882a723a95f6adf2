"""The showcase: synthetic workloads, the demo, the prompt-cost model and the per-turn benchmark."""
