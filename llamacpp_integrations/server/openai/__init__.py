"""OpenAI's APIs: chat completions, legacy completions, embeddings and models, and
llama-server's extras beside them (``/tokenize``, ``/detokenize``, ``/apply-template``,
``/v1/rerank``), which answer failures in OpenAI's shape too.

``schemas`` (the bodies), ``options`` (a body to the client core's call options, in one place),
``reasoning`` (a chat body's reasoning asks resolved), ``field_policy`` (undeclared fields
refused or ignored), ``bodies`` (answers to OpenAI's bodies), ``choices`` (``n`` answers to one
request), ``routes`` (the handlers), ``extras`` and ``rerank`` (llama-server's extras).
"""
