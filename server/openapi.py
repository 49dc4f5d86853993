"""The OpenAPI 3.1 document of API v1, built from the route table and the msgspec types the
routes decode and answer with (one definition: the schemas are msgspec's own)."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger import commands, results
from server.routes import ROUTES, SqlBody

_BODIES: dict[str, Any] = {
    "Commit": commands.Commit, "Pull": commands.Pull, "QueueAppend": commands.QueueAppend,
    "QueueTruncate": commands.QueueTruncate, "GroupSet": commands.GroupSet,
    "Reset": commands.Reset, "Sql": SqlBody,
}
_ANSWERS: dict[str, Any] = {
    "CommitResult": results.CommitResult, "PullResult": results.PullResult,
    "QueueResult": results.QueueResult, "GroupResult": results.GroupResult,
    "GroupDeleteResult": results.GroupDeleteResult, "ResetResult": results.ResetResult,
}
_LOOSE = {"Rows": {"type": "array", "items": {"type": "object"}},
          "Results": {"type": "array", "items": {"type": "object"}},
          "Object": {"type": "object"}}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
_STATUS = {400: "A bad value, named in `error`", 401: "No token, or an unknown one",
           403: "The token's role or groups do not allow it", 404: "No such route",
           405: "Method not allowed on this path", 408: "The body came too slowly",
           409: "Refused by a rule", 413: "The body or its commands are over the limit",
           503: "Busy or shutting down: retry later"}


def openapi_document(*, tokens: bool) -> dict[str, Any]:
    """The document; `tokens`: the server checks bearer tokens (else loopback, no auth)."""
    types = list(_BODIES.values()) + list(_ANSWERS.values()) + [commands.AnyCommand]
    (schemas_list, components) = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}")
    named = dict(zip([*_BODIES, *_ANSWERS, "Command"], schemas_list, strict=True))
    components = {k: _without_op(v) for k, v in components.items()}
    components["Error"] = _ERROR
    paths: dict[str, Any] = {}
    for route in ROUTES:
        op: dict[str, Any] = {"summary": route.summary, "responses": _responses(route, named)}
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in route.regex.groupindex]
        params += [{"name": q, "in": "query", "required": False, "schema": {"type": "string"}}
                   for q in route.query]
        if params:
            op["parameters"] = params
        if route.body == "Commands":
            op["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": {"type": "array", "items": named["Command"]}},
                "application/x-ndjson": {"schema": {"type": "string"}}}}
        elif route.body is not None:
            op["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": named[route.body]}}}
        if tokens and not route.public:
            op["security"] = [{"bearer": []}]
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
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def _without_op(schema: dict[str, Any]) -> dict[str, Any]:
    """A command's `op` is implied by its route: not required in a route's body."""
    required = [r for r in schema.get("required", []) if r != "op"]
    out = dict(schema)
    if "required" in schema:
        out["required"] = required
    return out


def _responses(route: Any, named: dict[str, Any]) -> dict[str, Any]:
    answer = _LOOSE.get(route.answer) or named.get(route.answer) or {"type": "object"}
    out: dict[str, Any] = {"200": {"description": "OK", "content": {
        "application/json": {"schema": answer}}}}
    statuses = [400, 404, 405, 503] + ([] if route.public else [401, 403])
    if route.body is not None:
        statuses += [408, 413]
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
