"""The OpenAPI 3.1 document of API v1, built from the route table and the msgspec types the
routes decode and answer with (one definition: the schemas are msgspec's own)."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.commands import command as commands
from ledger.commands import results
from ledger.fold.events import KINDS
from ledger.limits import LAG_WINDOW_MAX, NAME_PATTERN, OFFSET_MAX, QUEUE_ID_MAX, TS_MAX
from ledger.reads.generations import GenerationsQuery, QueueGeneration
from ledger.timeparse import EPOCH_SECONDS_MAX, EPOCH_SECONDS_MIN
from server.routes import ROUTES, SqlBody

_BODIES: dict[str, Any] = {
    "Commit": commands.Commit, "Pull": commands.Pull, "QueueAppend": commands.QueueAppend,
    "QueueTruncate": commands.QueueTruncate, "GroupSet": commands.GroupSet,
    "Reset": commands.Reset, "Sql": SqlBody, "Generations": GenerationsQuery,
}
_ANSWERS: dict[str, Any] = {
    "CommitResult": results.CommitResult, "PullResult": results.PullResult,
    "QueueResult": results.QueueResult, "GroupResult": results.GroupResult,
    "GroupDeleteResult": results.GroupDeleteResult, "ResetResult": results.ResetResult,
    "QueueGenerations": list[QueueGeneration],
}
_LOOSE = {"Rows": {"type": "array", "items": {"type": "object"}},
          "Results": {"type": "array", "items": {"type": "object"}},
          "Object": {"type": "object"}}
#: What msgspec's types leave to `commands.validate`, said in JSON Schema where it can be: the
#: name alphabet (limits.NAME_PATTERN) and times (timeparse.parse_time: epoch ms; ISO-8601, UTC
#: unless it says otherwise; now). Digits in a query string that read as epoch seconds are
#: refused as ambiguous, a JSON integer never is.
_NAME = {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"}
_ISO_OR_NOW = {"type": "string", "pattern": "^(now|(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])-"
                                            "(0[1-9]|1[0-9]|2[0-8])(T([01][0-9]|2[0-3]):[0-5]"
                                            "[0-9](:[0-5][0-9](\\.[0-9]{3})?)?Z?)?)$"}
_TIME = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": TS_MAX}, _ISO_OR_NOW]}
_QUERY_TIME = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": EPOCH_SECONDS_MIN - 1},
                         {"type": "integer", "minimum": EPOCH_SECONDS_MAX, "maximum": TS_MAX},
                         _ISO_OR_NOW]}
_FIELDS = {"group": _NAME, "topic": _NAME, "client": _NAME, "actor": _NAME, "ts": _TIME,
           "store_time": _TIME, "to_datetime": _TIME, "to_state_at": _TIME}
_QUERY = {"topic": _NAME, "group": _NAME, "at": _QUERY_TIME, "since": _QUERY_TIME,
          "until": _QUERY_TIME, "datetime": _QUERY_TIME, "kind": {"type": "string", "enum": list(KINDS)},
          "queue_id": {"type": "integer", "minimum": 0, "maximum": QUEUE_ID_MAX},
          "limit": {"type": "integer", "minimum": 0, "maximum": OFFSET_MAX},
          "window": {"type": "integer", "minimum": 1, "maximum": LAG_WINDOW_MAX},
          "allowed_lag": {"type": "integer", "minimum": 0, "maximum": OFFSET_MAX},
          "windows": {"type": "string", "enum": ["true", "false"]},
          "queue_events": {"type": "string", "enum": ["true", "false"]},
          "every": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": TS_MAX},
                              {"type": "string", "minLength": 3, "pattern":
                                  "^[Pp]([0-9]+[Ww])?([0-9]+[Dd])?([Tt]([0-9]+[Hh])?([0-9]+[Mm])?"
                                  "([0-9]+(\\.[0-9]{1,3})?[Ss])?)?$"}]}}
#: Query parameters a route cannot do without (its handler answers 400 naming them).
_REQUIRED = {("/v1/state", "at"), ("/v1/lookup", "topic"), ("/v1/lookup", "datetime"),
             *((path, q) for path in ("/v1/groups/{group}/lag/series", "/v1/lag/series")
               for q in ("since", "until", "every"))}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
_STATUS = {400: "A bad value, named in `error`", 401: "No token, or an unknown one",
           403: "The token's role or groups do not allow it", 404: "No such route",
           405: "Method not allowed on this path", 408: "The body came too slowly",
           409: "Refused by a rule", 413: "The body or its commands are over the limit",
           415: "The body is not application/json (or application/x-ndjson)",
           421: "Without tokens: a Host that is not a loopback address (DNS rebinding)",
           503: "Busy or shutting down: retry later"}
#: Who may send what (server/tokens.py ROLES_OF_OP): the bearer scheme's description.
_ROLES_TEXT = ("Roles: consume (pull, commit; progress and lag of its groups), produce (queue "
               "append, truncate, bounds), sync (sync, and queue append, truncate and bounds: "
               "what brokers, mirrors and importers send), operate (resets, group set and "
               "delete, sync), audit (every read, SQL included), backfill (may give a ts more "
               "than the clock skew ahead of the ledger's clock; nothing else). A token's "
               "groups (globs) bound the groups it touches.")


def openapi_document(*, tokens: bool) -> dict[str, Any]:
    """The document; `tokens`: the server checks bearer tokens (else loopback, no auth)."""
    types = list(_BODIES.values()) + list(_ANSWERS.values()) + [commands.AnyCommand]
    (schemas_list, components) = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}")
    named = dict(zip([*_BODIES, *_ANSWERS, "Command"], schemas_list, strict=True))
    components = {k: _without_op(v) if k in _COMMANDS else v for k, v in components.items()}
    components["Error"] = _ERROR
    paths: dict[str, Any] = {}
    for route in ROUTES:
        op: dict[str, Any] = {"summary": route.summary, "responses": _responses(route, named)}
        params = [{"name": name, "in": "path", "required": True, "schema": _NAME}
                  for name in route.regex.groupindex]
        params += [{"name": q, "in": "query", "required": (route.pattern, q) in _REQUIRED,
                    "schema": _QUERY.get(q, {"type": "string"})} for q in route.query]
        if params:
            op["parameters"] = params
        if route.body == "Commands":
            op["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": {"type": "array", "items": named["Command"]}},
                "application/x-ndjson": {"schema": {"type": "string"}}}}
        elif route.body is not None:
            schema = named[route.body]
            if "group" in route.regex.groupindex:  # the path names the group: the body may not
                name = schema["$ref"].rsplit("/", 1)[1]
                schema = {**components[name], "required": [
                    r for r in components[name].get("required", []) if r != "group"]}
            op["requestBody"] = {"required": route.body not in ("GroupSet", "Generations"),
                                 "content": {
                "application/json": {"schema": schema}}}
        if tokens and not route.public:
            op["security"] = [{"bearer": []}]
        if not tokens:  # a foreign Origin, a Host that is not loopback (server/guard.py)
            op["responses"].update(_errors((403, 421)))
            op["responses"] = dict(sorted(op["responses"].items()))
        paths.setdefault(route.pattern, {})[route.method.lower()] = op
    paths["/metrics"] = {"get": {"summary": "Prometheus metrics", "responses": {
        "200": {"description": "Prometheus text", "content": {"text/plain": {
            "schema": {"type": "string"}}}},
        **_errors((401, 403))}, **({"security": [{"bearer": []}]} if tokens else {})}}
    console = {"description": "A page or file of the web console", "content": {
        "text/html": {"schema": {"type": "string"}}}}
    paths["/"] = {"get": {"summary": "The web console: the groups page (no token: the pages "
                                     "call this API with the user's)",
                          "responses": {"200": console, "304": {"description": "Not modified"}}}}
    paths["/console/{file}"] = {"get": {
        "summary": "A file of the web console (HTML, JavaScript, CSS, the chart library)",
        "parameters": [{"name": "file", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {"200": console, "304": {"description": "Not modified"},
                      **_errors((404,))}}}
    paths["/openapi.json"] = {"get": {"summary": "This document", "responses": {
        "200": {"description": "OpenAPI 3.1", "content": {"application/json": {
            "schema": {"type": "object"}}}}}}}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "offset-ledger", "version": "1",
                 "description": "An event-sourced ledger of consumer offsets: commits, pulls, "
                                "server-side resets, history, lag health."},
        "paths": paths,
        "components": {"schemas": components},
    }
    if tokens:
        doc["components"]["securitySchemes"] = {"bearer": {
            "type": "http", "scheme": "bearer", "description": _ROLES_TEXT}}
    return doc


_COMMANDS = {c.__name__ for c in commands.COMMAND_TYPES} | {"PlanRow", "QueueRef"}


def _without_op(schema: dict[str, Any]) -> dict[str, Any]:
    """A command's `op` is implied by its route: not required in a route's body. Its names and
    times get the rules `commands.validate` checks (`_FIELDS`)."""
    out = dict(schema)
    if "required" in schema:
        out["required"] = [r for r in schema["required"] if r != "op"]
    out["properties"] = {k: _field(v, _FIELDS[k]) if k in _FIELDS else v
                         for k, v in schema.get("properties", {}).items()}
    return out


def _field(schema: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """`rule` in place of a field's plain type, keeping null where the field is optional."""
    nullable = {"type": "null"} in schema.get("anyOf", [])
    out = {"anyOf": [rule, {"type": "null"}]} if nullable else dict(rule)
    return out | {k: v for k, v in schema.items() if k in ("default", "description")}


def _responses(route: Any, named: dict[str, Any]) -> dict[str, Any]:
    answer = _LOOSE.get(route.answer) or named.get(route.answer) or {"type": "object"}
    out: dict[str, Any] = {"200": {"description": "OK", "content": {
        "application/json": {"schema": answer}}}}
    statuses = [400, 404, 405, 503] + ([] if route.public else [401, 403])
    if route.body is not None:
        statuses += [408, 413, 415]
    if route.answer in ("CommitResult", "ResetResult"):
        out["409"] = {"description": _STATUS[409], "content": {
            "application/json": {"schema": named[route.answer]}}}
    elif route.method != "GET":
        statuses.append(409)
    out.update(_errors(statuses))
    return out


def _errors(statuses: Any) -> dict[str, Any]:
    return {str(s): {"description": _STATUS[s], "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for s in sorted(set(statuses))}
