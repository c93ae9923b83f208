"""Chat templates written for the tests, in the tool styles of real model families.

SmolLM2's own template knows no tools, so these let the real model run every native call
syntax: each renders the tools, earlier calls and tool results the way its family does (the
markers and JSON shapes; the wording is ours). ``STRICT_ALTERNATION`` knows no tools and, like
Gemma's, refuses anything but alternating user / assistant turns.
"""

from __future__ import annotations

HERMES_STYLE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Functions you can call are listed inside <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call one, write its name and arguments as JSON between <tool_call></tool_call> tags:
<tool_call>
{"name": "function name", "arguments": {"argument": "value"}}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}{% for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

LLAMA3_STYLE = """\
{%- for message in messages %}<|start_header_id|>\
{{ 'ipython' if message.role == 'tool' else message.role }}<|end_header_id|>

{% if message.role == 'user' and loop.last and tools %}\
You may answer with a call to one of these functions, written as JSON \
{"name": "function name", "parameters": {"argument": "value"}}:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}
{% endif %}
{%- if message.tool_calls %}{% for call in message.tool_calls %}\
{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}\
{% endfor %}{% else %}{{ message.content }}{% endif %}<|eot_id|>
{% endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

MISTRAL_STYLE = """\
{%- for message in messages %}
{%- if message.role == 'system' %}{{ message.content }}

{% elif message.role == 'user' %}\
{% if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}\
[INST]{{ message.content }}[/INST]\
{% elif message.role == 'assistant' and message.tool_calls %}[TOOL_CALLS][\
{% for call in message.tool_calls %}\
{% if call.id | length != 9 %}\
{{ raise_exception('tool call ids must be 9 characters') }}{% endif %}\
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}, \
"id": "{{ call.id }}"}{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}\
{% elif message.role == 'assistant' %}{{ message.content }}{{ eos_token }}\
{% elif message.role == 'tool' %}[TOOL_RESULTS]{"content": {{ message.content | tojson }}, \
"call_id": "{{ message.tool_call_id }}"}[/TOOL_RESULTS]\
{% endif %}
{%- endfor %}"""

MISTRAL_ARGS_STYLE = """\
{%- for message in messages %}
{%- if message.role == 'system' %}[SYSTEM_PROMPT]{{ message.content }}[/SYSTEM_PROMPT]\
{% elif message.role == 'user' %}\
{% if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}\
[INST]{{ message.content }}[/INST]\
{% elif message.role == 'assistant' and message.tool_calls %}\
{% for call in message.tool_calls %}[TOOL_CALLS]{{ call.function.name }}[ARGS]\
{{ call.function.arguments | tojson }}{% endfor %}{{ eos_token }}\
{% elif message.role == 'assistant' %}{{ message.content }}{{ eos_token }}\
{% elif message.role == 'tool' %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]\
{% endif %}
{%- endfor %}"""

STRICT_ALTERNATION = """\
{%- for message in messages %}
{%- if message.role not in ('system', 'user', 'assistant') %}\
{{ raise_exception('unknown role ' + message.role) }}{% endif %}
{%- set offset = 1 if messages[0].role == 'system' else 0 %}
{%- if message.role != 'system' \
and (message.role == 'user') != (loop.index0 % 2 == offset) %}\
{{ raise_exception('roles must alternate user/assistant') }}{% endif %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

NATIVE_TEMPLATES = {
    "hermes": HERMES_STYLE,
    "llama3": LLAMA3_STYLE,
    "mistral": MISTRAL_STYLE,
    "mistral-args": MISTRAL_ARGS_STYLE,
}
