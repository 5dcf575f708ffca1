"""TLS to the sentinels and to the master behind them (PLANLOOP_REDIS_SENTINEL_TLS*).

A sentinel URL has no ``rediss://`` form to say "TLS" (kombu's ``sentinel://`` parts are
plain host:port pairs), so the settings say it, once for both sides: a deployment that
runs its sentinels with ``tls-port`` runs its data nodes so too (``tls-replication``). The
same options reach redis-py's clients (the sentinel connections' ``sentinel_kwargs`` and
the master pool's connections) and kombu's broker (its transport's ``sentinel_kwargs`` and
Celery's ``broker_use_ssl``, which kombu hands to the master's connections).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planloop.config.settings import Settings


@dataclass(frozen=True)
class SentinelTls:
    """How to verify the servers (and, with a client certificate, be verified by them)."""

    ca_file: str = ""  # the CA bundle the servers' certificates are checked against
    cert_file: str = ""  # a client certificate, for servers with tls-auth-clients
    key_file: str = ""
    check_hostname: bool = True

    def redis_kwargs(self) -> dict[str, Any]:
        """redis-py's ``ssl_*`` connection options (kombu's ``broker_use_ssl`` too)."""
        kwargs: dict[str, Any] = {
            "ssl_cert_reqs": "required",  # an unverified server is refused, never trusted
            "ssl_check_hostname": self.check_hostname,
        }
        if self.ca_file:
            kwargs["ssl_ca_certs"] = self.ca_file
        if self.cert_file:
            kwargs["ssl_certfile"] = self.cert_file
        if self.key_file:
            kwargs["ssl_keyfile"] = self.key_file
        return kwargs

    def sentinel_kwargs(self) -> dict[str, Any]:
        """The options of a connection to one sentinel (a ``redis.Redis``'s)."""
        return {"ssl": True, **self.redis_kwargs()}


def sentinel_tls(settings: Settings) -> SentinelTls | None:
    """The TLS ``settings`` ask for behind Sentinel; None: plain TCP."""
    if not settings.redis_sentinel_tls:
        return None
    return SentinelTls(
        ca_file=settings.redis_sentinel_tls_ca_file,
        cert_file=settings.redis_sentinel_tls_cert_file,
        key_file=settings.redis_sentinel_tls_key_file,
        check_hostname=settings.redis_sentinel_tls_check_hostname,
    )
