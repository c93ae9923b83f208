"""Speculative decoding: drafts proposed before a step (n-gram lookup or a draft model), verified
inside the step's shared decode. ``drafts`` holds the pure rules, ``draft_model`` the small model
and its context, ``step`` what the worker asks of speculation each step."""
