"""OpenAI's Responses API: ``POST /v1/responses``.

``schemas`` (the body), ``options`` (a body to the client core's call options, in one place),
``inputs`` (input items to chat messages), ``bodies`` (the ``response`` object), ``events`` (its
stream) and ``routes`` (the handler).
"""
