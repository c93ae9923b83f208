"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

``schemas`` (the bodies), ``messages`` (content blocks to the template's messages), ``options``
(a body to the client core's call options, in one place), ``bodies`` (the ``message`` body),
``stream`` (its events), ``errors`` (Anthropic's error shape) and ``routes`` (the handlers).
"""
