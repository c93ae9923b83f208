"""The llama.cpp boundary: every module of the engine that imports ``llama_cpp`` lives here.

``runner`` (weights, the generation context, one batched decode), ``sampler`` (sampler chains),
``embedder`` (the embedding context), ``vision`` (libmtmd projectors and image prompts),
``devices`` (backends and offload) and ``llama_log`` (llama.cpp's log, routed to ``logging``).
llama.cpp's return codes become this package's errors here. Nothing outside this folder imports
``llama_cpp``; importing this package itself loads nothing.
"""
