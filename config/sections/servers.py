"""The settings of metrics, Flower and the web console.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import NoDecode


class ServerSettings(BaseModel):
    """The ``PLANLOOP_*`` fields of metrics, Flower and the web console."""

    # --- Metrics (Prometheus) -----------------------------------------------------------
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Port of a worker's /metrics (0: not served)."
    )
    supervisor_metrics_port: int = Field(
        0, ge=0, le=65535, description="Port of a supervisor's /metrics (0: not served)."
    )
    metrics_shared_lease_s: float = Field(
        120.0,
        gt=0,
        description="Seconds the supervisor that exports the gauges read from shared state "
        "(queue depth, active sessions) keeps that role between scrapes, default 120: one "
        "supervisor exports them, so summing over supervisors counts them once. Keep it "
        "above the scrape interval.",
    )
    metrics_address: str = Field(
        "127.0.0.1",
        description="Address a worker's and a supervisor's /metrics bind to, default "
        "127.0.0.1 (this host only: the endpoints have no auth); 0.0.0.0 to let a scraper "
        "on another host in, behind a firewall.",
    )
    metrics_dir: str = Field(
        "",
        description="prometheus_client's multiprocess directory for prefork workers (emptied "
        "at start; default: a fresh temporary directory).",
    )

    otel_endpoint: str | None = Field(
        None,
        description="OpenTelemetry collector (OTLP over HTTP, e.g. http://otel:4318): one "
        "trace per session; needs the `otel` extra. Unset: no traces.",
    )

    # --- Flower --------------------------------------------------------------------------
    flower_port: int = Field(
        5555,
        ge=1,
        le=65535,
        description="Port Flower listens on (`planloop flower`), default 5555.",
    )
    flower_basic_auth: SecretStr = Field(
        SecretStr(""),
        description="user:password pairs (comma-separated) Flower asks for; Flower's own, not "
        "the console's. Unset: Flower on a loopback address generates a password and keeps it "
        "in secrets_dir; on any other address it refuses to start.",
    )
    secrets_dir: str = Field(
        ".planloop",
        description="Directory where a console or Flower started without credentials keeps "
        "the password it generated (0600 files, reused on restart).",
    )

    # --- web console -----------------------------------------------------------------------
    console_port: int = Field(
        8765, ge=1, le=65535, description="Port of the web console (`planloop console`)."
    )
    console_address: str = Field(
        "127.0.0.1",
        description="Address the console binds (a non-loopback one needs console users).",
    )
    console_users: SecretStr = Field(
        SecretStr(""),
        description="Console users, whitespace-separated `name:role:hash` entries (role "
        "viewer, operator or admin; hash from `planloop users hash`). Unset with no "
        "console_users_file: the console on a loopback address generates an admin password "
        "and keeps it in secrets_dir; on any other address it refuses to start.",
    )
    console_users_file: str = Field(
        "",
        description="A file of console users, one `name:role:hash` a line (`planloop users "
        "add` writes it); read with console_users.",
    )
    console_proxy_user_header: str = Field(
        "",
        description="A header naming the user, set by a reverse proxy that authenticated "
        "them (e.g. X-Forwarded-User); believed only from console_trusted_proxies. Unset: "
        "no proxy login.",
    )
    console_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses of reverse proxies whose console_proxy_user_header is "
        "believed (comma-separated or a JSON list).",
    )
    console_proxy_role: Literal["viewer", "operator", "admin"] = Field(
        "viewer",
        description="Role of a proxy-authenticated user not listed in the console users "
        "(listed ones keep their role).",
    )

    # --- web console: browser hardening (console/hardening.py, console/live_hub.py) -----
    console_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names (no port) the console answers besides its bound address, "
        "localhost, 127.0.0.1 and ::1, e.g. console.example.com when a proxy or DNS name "
        "fronts it: a comma list or a JSON list. Any other Host header is refused (400), "
        "which stops DNS rebinding. Default none.",
    )
    console_max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        le=1_073_741_824,
        description="Largest request body the console reads, bytes, default 1 MiB (1048576): "
        "a longer Content-Length is refused (413) before anything is read, a chunked body "
        "as soon as it passes the limit.",
    )
    console_streams_per_user: int = Field(
        20,
        ge=1,
        description="Live streams (server-sent events, one per open session page) one user "
        "may hold open at once, default 20; past it a page is refused (429).",
    )
    console_streams_total: int = Field(
        500,
        ge=1,
        description="Live streams the console holds open at once for everyone, default 500; "
        "past it a page is refused (429). Viewers of one session share one Redis reader.",
    )
