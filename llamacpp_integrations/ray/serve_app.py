"""The ``serve`` app as a Ray Serve application: an ingress and N engine replicas.

::

    HTTP --> Serve proxy --> LlamaCppIngress --(PrefixAffinityRouter)--> LlamaCppReplica x N
                             reads the body,                             one engine, the whole
                             keys the prompt                             create_app app

Each ``LlamaCppReplica`` holds one engine (an ``EngineService``, so ``RayEngine`` calls it
through a handle too) and runs the server's ``create_app`` app on it: every route the
``serve`` command has, answered by the replica's one engine. The ingress is there because
Serve's proxy hands a router the request's headers only, never its body: it reads the body,
keys the prompt (``prefix_keys.http_affinity_key``) and calls a replica through a handle whose
router (``PrefixAffinityRouter``) sees that key. It holds no model (no CPU reserved) and
streams the replica's ASGI messages back as they come.

Three ways in: ``serve_application`` (Python, returns the bound ``Application``), ``build_app`` (the
builder a Serve config file names: ``import_path:
llamacpp_integrations.ray.serve_app:build_app``) and ``run_on_ray`` (the CLI's ``serve
--ray``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Mapping
from typing import Any, cast

from ..engine.config import EngineConfig
from ..errors import InvalidRequestError
from ..multimodal import ImagePolicy
from ..optional import requires
from ..server.app import DEFAULT_MAX_BODY_BYTES, create_app
from .engine_service import EngineService
from .http_relay import Message, answer, failure_messages, plain_scope, read_body, route_path
from .prefix_keys import RoutedHttp, http_affinity_key
from .prefix_router import PrefixAffinityRouter
from .serve_options import ServeOptions

with requires("ray"):
    import ray
    from ray import serve
    from ray.exceptions import RayError
    from ray.serve import Application
    from ray.serve.config import RequestRouterConfig
    from ray.serve.exceptions import RayServeException
    from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

__all__ = [
    "REPLICA_HEADER",
    "LlamaCppIngress",
    "LlamaCppReplica",
    "build_app",
    "run_on_ray",
    "serve_application",
]

REPLICA_HEADER = "x-llamacpp-replica"
"""The response header naming the replica that answered (its Serve replica id)."""
INGRESS_MAX_ONGOING = 4096
"""Calls one ingress replica holds at once: each only waits on a replica, holding no model."""
_APP_OPTIONS = frozenset(
    name
    for name in inspect.signature(create_app).parameters
    if name not in {"engine", "roster", "close_engine"}
)


class LlamaCppReplica(EngineService):
    """One replica: an engine (loaded when the replica starts) behind both the engine
    interface's methods (``EngineService``'s, for ``RayEngine``) and the server's app
    (``handle_http``, for the ingress).

    Args:
        engine: The ``EngineConfig``, or its settings as a mapping (``model`` among them).
        app_options: ``create_app``'s options (``api_key``, ``model_name``,
            ``request_timeout``, ``max_body_bytes``, ``image_policy``, ``cors_origins``).
    """

    def __init__(
        self, engine: EngineConfig | Mapping[str, Any], app_options: Mapping[str, Any] | None = None
    ) -> None:
        if isinstance(engine, EngineConfig):
            super().__init__(engine)
        else:
            super().__init__(**engine)
        self._app = create_app(self._engine, **(app_options or {}))
        try:
            self._replica_id: str = serve.get_replica_context().replica_tag
        except RayServeException:  # made outside Serve (a test, a plain actor)
            self._replica_id = "local"

    def replica_id(self) -> str:
        """This replica's Serve id (also sent as the ``x-llamacpp-replica`` header)."""
        return self._replica_id

    async def handle_http(self, call: RoutedHttp) -> AsyncGenerator[Message, None]:
        """The app's answer to one HTTP request, as ASGI messages (call it with
        ``stream=True``); cancelling the call cancels the request."""
        header = (REPLICA_HEADER.encode(), self._replica_id.encode())
        async for message in answer(self._app, call, [header]):
            yield message


class _RelayApp:
    """The ingress's ASGI app: reads each request, keys its prompt, relays a replica's answer.
    (An object with an async ``__call__``: uvicorn, which runs the lifespan here, takes a bound
    method for an ASGI2 app.)"""

    def __init__(self, replicas: DeploymentHandle[Any], max_body_bytes: int) -> None:
        self._replicas = replicas.options(stream=True)
        self._limit = max_body_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # nothing to start: the replicas hold the engines
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path = route_path(scope)
        body = await read_body(receive, self._limit)
        if body is None:  # the client left before its request was read: nothing to answer
            return
        call = RoutedHttp(plain_scope(scope), body, http_affinity_key(path, body))
        start: Message | None = None
        ended = False
        stream = cast(DeploymentResponseGenerator[Message], self._replicas.handle_http.remote(call))
        try:
            async for message in stream:
                start = message if message["type"] == "http.response.start" else start
                ended = message["type"] == "http.response.body" and not message.get("more_body")
                await send(message)
        except asyncio.CancelledError:  # the client left: stop the replica's request now
            stream.cancel()  # type: ignore[no-untyped-call]  # untyped in Ray
            raise
        except (RayError, RayServeException) as error:  # the replica died or was unreachable
            if not ended:
                for message in failure_messages(path, start, type(error).__name__):
                    await send(message)


@serve.ingress()
class LlamaCppIngress:
    """The HTTP front: reads each request, keys its prompt, and relays a replica's answer.

    Args:
        replicas: The handle of the ``LlamaCppReplica`` deployment.
        max_body_bytes: The app's body limit (the ingress reads one byte more at most).
    """

    def __init__(self, replicas: DeploymentHandle[Any], max_body_bytes: int) -> None:
        self._app = _RelayApp(replicas, max_body_bytes)

    def __serve_build_asgi_app__(self) -> Any:
        """Serve's hook for the ASGI app of a late-bound ingress."""
        return self._app


def serve_application(
    engine: EngineConfig | Mapping[str, Any],
    *,
    options: ServeOptions | None = None,
    app_options: Mapping[str, Any] | None = None,
    http: bool = True,
) -> Application:
    """The bound Serve application (``serve.run(serve_application(...), name=...)``).

    Args:
        engine: Each replica's engine: an ``EngineConfig`` or its settings (``model=...``).
        options: Replicas, autoscaling, health checks and drain (``ServeOptions``).
        app_options: ``create_app``'s options for every replica's app.
        http: Put the HTTP ingress in front (``False``: the replicas are the application, for
            ``RayEngine`` alone; run it with ``route_prefix=None``).
    """
    options = options or ServeOptions()
    app_options = dict(app_options or {})
    unknown = sorted(set(app_options) - _APP_OPTIONS)
    if unknown:
        raise InvalidRequestError(f"unknown app option(s) {unknown}; known: {sorted(_APP_OPTIONS)}")
    if isinstance(engine, EngineConfig):
        n_seq_max = engine.n_seq_max
    else:
        n_seq_max = int(engine.get("n_seq_max", EngineConfig.n_seq_max))
    # Named by import path: every router (one per proxy, per handle owner) imports it there.
    router_settings: dict[str, Any] = {
        "request_router_class": f"{PrefixAffinityRouter.__module__}.PrefixAffinityRouter",
        "request_router_kwargs": {"load_factor": options.load_factor},
    }
    router = RequestRouterConfig(**router_settings)
    replicas = serve.deployment(
        request_router_config=router, **options.deployment_options(n_seq_max)
    )(LlamaCppReplica)
    bound: Application = replicas.bind(engine, app_options)
    if not http:
        return bound
    ingress = serve.deployment(
        num_replicas=options.ingress_replicas,
        max_ongoing_requests=INGRESS_MAX_ONGOING,
        ray_actor_options={"num_cpus": 0},
    )(LlamaCppIngress)
    limit = int(app_options.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES))
    result: Application = ingress.bind(bound, limit)
    return result


def build_app(args: dict[str, Any]) -> Application:
    """The application a Serve config file names (``import_path``), from its ``args``:

    * ``model`` (required) and ``engine``: the model and the other ``EngineConfig`` settings;
    * ``serve``: ``ServeOptions`` (``replicas``, ``autoscaling``, ``num_cpus``...);
    * ``server``: ``create_app``'s options (``api_key``, ``model_name``, ``request_timeout``;
      ``image_policy`` as a mapping of ``ImagePolicy``'s fields).
    """
    unknown = sorted(set(args) - {"model", "engine", "serve", "server"})
    if unknown or "model" not in args:
        raise InvalidRequestError(
            f"a llama.cpp Serve app takes model, engine, serve and server args (got {sorted(args)})"
        )
    engine = {**dict(args.get("engine") or {}), "model": str(args["model"])}
    server = dict(args.get("server") or {})
    if isinstance(server.get("image_policy"), Mapping):
        policy = dict(server["image_policy"])
        policy["allowed_dirs"] = tuple(policy.get("allowed_dirs", ()))
        server["image_policy"] = ImagePolicy(**policy)
    options = ServeOptions.from_mapping(args.get("serve") or {})
    return serve_application(engine, options=options, app_options=server)


def run_on_ray(
    app: Application,
    *,
    name: str = "llamacpp",
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
) -> None:
    """Run ``app`` on a Ray cluster (``address``; ``None``: ``RAY_ADDRESS`` or a new local
    one) with Serve's proxy on ``host:port``, until interrupted; then delete it (and stop the
    cluster this call started)."""
    started = not ray.is_initialized()
    if started:
        ray.init(address=address)
    try:
        serve.start(http_options={"host": host, "port": port})
        try:
            serve.run(app, name=name, route_prefix="/", blocking=True)
        except KeyboardInterrupt:
            pass
        finally:
            serve.delete(name)
    finally:
        if started:
            ray.shutdown()
