"""JSON schema -> GBNF grammar (llama.cpp syntax, root rule ``root``), valid by construction.

The entry points are :func:`schema_to_gbnf` (a schema's grammar), :func:`schema_rule` (a
schema's rule inside a grammar being assembled in a :class:`GrammarRules`, as tool calls do),
:func:`json_object_gbnf` (JSON mode) and :func:`any_json_gbnf`.

Every string the grammar returned by :func:`schema_to_gbnf` accepts is a JSON document that
validates against the schema. Where a constraint can only be expressed approximately, the grammar
accepts a *subset* of the valid instances, never an invalid one; a keyword that cannot be honoured
at all raises :class:`~llamacpp_integrations.errors.SchemaNotSupportedError` naming its place in
the schema (``#/properties/age/multipleOf``). Metadata (``title``, ``description``, ``examples``,
``default``, ``$comment`` ...) and keywords JSON Schema does not define are ignored, as a
validator ignores them.

Supported:

* ``type`` (a name or a list), ``enum``, ``const``;
* objects: ``properties`` (emitted in declared order; required ones always, optional ones may be
  skipped), ``required``, ``additionalProperties`` (false, true or a schema). Objects with declared
  properties are always closed (extra properties would only be allowed, never required). With no
  declared properties: ``{}`` when ``additionalProperties`` is false, any object when it is true or
  absent, a string-keyed map of its values when it is a schema. ``minProperties`` /
  ``maxProperties`` only where the generated objects satisfy them anyway;
* arrays: ``items``, ``prefixItems`` (and the draft-7 list form of ``items`` with
  ``additionalItems``), ``minItems``, ``maxItems``; ``uniqueItems: true`` only with at most one
  item;
* strings: ``minLength`` / ``maxLength`` (counted in code points, as validators do: every escape
  sequence is one character and surrogate escapes are not emitted), ``format`` among ``date``,
  ``time``, ``date-time``, ``uuid`` (and pydantic's ``uuid1`` to ``uuid5``), ``email``, ``ipv4``
  (each a conservative subset, see ``STRING_FORMATS``), ``pattern`` in a regular-expression subset
  (see :mod:`.regex_pattern`: literals and escapes, ``.``, ``\\d`` ``\\w`` ``\\s`` and their
  negations, bracket classes, groups, alternation, ``* + ? {n} {n,} {n,m}``, ``^`` / ``$`` at the
  ends), searched as JSON Schema does (an unanchored side allows any text), also together with
  ``minLength`` / ``maxLength``;
* integers and numbers with ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
  ``exclusiveMaximum`` (numeric draft 2020 form and boolean draft 4 form), exact digit by digit;
  ``multipleOf`` only when it is 1;
* ``anyOf``; ``oneOf`` when its branches are provably exclusive (different JSON types, disjoint
  ``const`` / ``enum`` values, or objects with a shared required property whose values are
  disjoint); ``allOf`` with a single constraining member; ``$ref`` to any local JSON pointer
  (``#``, ``#/$defs/...``, ``#/definitions/...``), recursion included.

Not supported (raise): ``not``, ``if`` / ``then`` / ``else``, ``dependentRequired`` /
``dependentSchemas`` / ``dependencies``, ``patternProperties``, ``propertyNames``,
``unevaluated*``, ``contains``, ``$dynamicRef``, non-local or anchor ``$ref``, a nested ``$id``,
other string formats, ``pattern`` with backreferences, lookaround, ``\\b``, inline flags,
``\\p{...}`` or anchors inside it (or malformed), ``pattern`` next to ``format``, and constraints
next to ``$ref`` / ``anyOf`` / ``oneOf`` / ``allOf`` / ``enum`` / ``const`` (besides ``type`` for
the last two), which would need an intersection.

Approximations (all narrowing):

* numbers have no exponent, at most 15 significant digits (so that distinct outputs stay distinct
  doubles and exclusive bounds hold after parsing) and at most 6 fraction digits (more when a
  bound needs them, up to the 15 digits); integer parts longer than 15 digits (only when a bound
  is that large) have no fraction; unbounded sides stop at 15 integer digits (below 2**53); a
  value exactly on a bound is written without trailing fraction zeros;
* formats: ``date`` is ``YYYY-MM-DD`` with years 1000-9999, months 01-12 and days valid for the
  month (February up to 28); ``time`` is ``HH:MM:SS[.ffffff]`` with ``Z`` or a ``+HH:MM`` offset
  (no leap second); ``date-time`` joins them with ``T``; ``uuid`` is lowercase 8-4-4-4-12 hex
  (``uuid1`` to ``uuid5`` with their version digit and the RFC 4122 variant); ``email`` is
  ``atom(.atom){0,2}@label.{1,3}tld`` with short ASCII atoms and labels;
* patterns: where regex engines disagree, what all of them match (``\\d`` ``\\w`` ``\\s`` are
  ASCII; ``\\D`` ``\\W`` exclude non-ASCII characters; ``\\S`` excludes any Unicode whitespace;
  ``.`` excludes ``\\r``, U+2028 and U+2029 too); one spelling per character (``json.dumps``');
  at most 10,000 optional copies per repeat; with ``minLength`` / ``maxLength``, exact when one
  part of the pattern varies in length, else the length range is shared among the varying parts;
* a schema without ``type`` takes the types its keywords bear on (any JSON value if none); an
  object with declared properties never gets undeclared ones, and ``additionalProperties``
  absent counts as false there;
* free-form values (``{}``, ``true``, objects without properties) use plain JSON numbers of the
  same shape (``-``, up to 15 integer digits, up to 6 fraction digits);
* whitespace between tokens is optional and bounded (a space or newline plus at most 16 blanks),
  so a small model cannot loop on spaces.
"""

from __future__ import annotations

from .gbnf import GrammarRules
from .schema_converter import any_json_gbnf, json_object_gbnf, schema_rule, schema_to_gbnf

__all__ = ["GrammarRules", "any_json_gbnf", "json_object_gbnf", "schema_rule", "schema_to_gbnf"]
