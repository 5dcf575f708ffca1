"""The settings of Redis and the SQL record.

One group of fields of :class:`planloop.config.settings.Settings`, the one class that reads
them from the environment.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class StoreSettings(BaseModel):
    """The ``PLANLOOP_*`` fields of Redis and the SQL record."""

    # --- Redis and SQL -------------------------------------------------------------------
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis for hot state, event streams, leases and the Celery broker. "
        "Behind Redis Sentinel: kombu's form, one `sentinel://host:port` per sentinel joined "
        "by `;` (e.g. `sentinel://h1:26379;sentinel://h2:26379/0`), with "
        "PLANLOOP_REDIS_SENTINEL_MASTER; the data password goes in the URL "
        "(`sentinel://:pw@h1:26379;...`).",
    )
    redis_sentinel_master: str = Field(
        "",
        description="The master name the sentinels monitor (`sentinel monitor NAME ...`); "
        "required when PLANLOOP_REDIS_URL is a sentinel:// URL, ignored otherwise.",
    )
    redis_sentinel_password: SecretStr = Field(
        SecretStr(""),
        description="Password of the sentinels themselves (their `requirepass`), when they "
        "have one; the master's and replicas' password is the URL's.",
    )
    redis_sentinel_tls: bool = Field(
        False,
        description="Behind Redis Sentinel: talk TLS to the sentinels and to the master and "
        "replicas they name (redis-server's `tls-port` on both sides; default false). The "
        "servers' certificates are verified (PLANLOOP_REDIS_SENTINEL_TLS_CA_FILE); ignored "
        "for a plain URL, whose `rediss://` says TLS.",
    )
    redis_sentinel_tls_ca_file: str = Field(
        "",
        description="Path of the CA bundle (PEM) the sentinels' and master's certificates "
        "are checked against; empty: the system's CAs.",
    )
    redis_sentinel_tls_cert_file: str = Field(
        "",
        description="Path of a client certificate (PEM) for servers that verify clients "
        "(`tls-auth-clients yes`); empty: none.",
    )
    redis_sentinel_tls_key_file: str = Field(
        "", description="Path of the client certificate's private key (PEM); empty: none."
    )
    redis_sentinel_tls_check_hostname: bool = Field(
        True,
        description="Whether a server's certificate must name the host or IP address it is "
        "reached at (sentinels announce the master by IP; default true).",
    )
    key_prefix: str = Field(
        "pl", description="Prefix of every Redis key Planloop writes (tests use their own)."
    )
    database_url: str = Field(
        "sqlite:///.planloop/planloop.db",
        description="SQLAlchemy URL of the durable record; SQLite file by default.",
    )
    db_auto_migrate: bool = Field(
        True,
        description="A supervisor upgrades the record's schema at start (default true); "
        "false: it refuses to start while the schema is behind (`planloop db upgrade`).",
    )
    store_retry_interval_s: float = Field(
        2.0,
        gt=0,
        description="Seconds before an attempt whose effect-ledger or SQL write failed (disk "
        "full, database locked) runs again (default 2).",
    )
    store_retry_limit: int = Field(
        150,
        ge=0,
        description="Attempts of a step that may fail on the store, a count, before the "
        "step fails for good and its session fails (default 150: five minutes at the "
        "default interval); they never use the step's max_retries.",
    )
