"""The worker: one thread per loaded model that admits, schedules, decodes and answers.

``host`` owns the weights and the thread; each engine on them attaches a ``core`` (its contexts,
scheduler and requests). Requests arrive through the ``inbox``; the ``scheduler`` plans each
step; ``active`` and ``output`` hold one running request's state and turn its tokens into text;
``logprobs`` reports token probabilities; ``shared_files`` counts users of what several engines
load once (projectors, draft models).
"""
