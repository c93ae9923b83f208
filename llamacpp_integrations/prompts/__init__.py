"""What turns a request into a prompt, for the local and the remote engine alike.

Chat templates (``chat_template``) rendered in a time- and size-limited sandbox
(``template_sandbox``), conversations adapted to what each template accepts (``template_caps``
probes, ``polyfills`` adapts); images as media markers in a chat's text (``media``); reasoning
formats and the splitting of thinking from answers (``reasoning``); fitting token lists into a
budget (``token_budget``). Pure Python: nothing here knows llama.cpp or the engine's request
types.
"""
