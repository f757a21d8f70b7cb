"""The one Config object, built once from the command line and passed down; nothing reads flags globally."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Header:
    """A response header given as `-header name=value` or in a hook's `response-headers`."""

    name: str
    value: str


@dataclass(frozen=True)
class Config:
    """Every webhook flag, with webhook's defaults."""

    ip: str = "0.0.0.0"
    port: int = 9000
    verbose: bool = False
    logfile: str = ""
    debug: bool = False
    nopanic: bool = False
    hotreload: bool = False
    urlprefix: str = "hooks"
    secure: bool = False
    template: bool = False
    cert: str = "cert.pem"
    key: str = "key.pem"
    version: bool = False
    list_cipher_suites: bool = False
    tls_min_version: str = "1.2"
    cipher_suites: str = ""
    x_request_id: bool = False
    x_request_id_limit: int = 0
    max_multipart_mem: int = 1 << 20
    http_methods: str = ""
    pidfile: str = ""
    socket: str = ""
    setuid: int = 0
    setgid: int = 0
    hooks: tuple[str, ...] = ()
    headers: tuple[Header, ...] = field(default_factory=tuple)
    # Beyond the reference (docs/limits.md): all off or harmless by default.
    command_timeout: float = 0.0
    max_concurrent_commands: int = 0
    max_body_size: int = 25 << 20
    shutdown_timeout: float = 25.0
    read_timeout: float = 30.0
    stream_write_timeout: float = 30.0  # stream-command-output's slow clients (docs/limits.md)
    stream_buffer: int = 4 << 20
    validate: bool = False
    trusted_proxies: tuple[str, ...] = ()
    # Per-client rate limits (docs/limits.md, "Rate limits"), soulteary/webhook's flags: off by default.
    rate_limit_enabled: bool = False
    rate_limit_rps: int = 100
    rate_limit_burst: int = 10
    workers: int = 1
    worker_class: str = "gevent"
    # Observability (docs/observability.md): off, and webhook's own log lines, by default.
    metrics: bool = False
    log_format: str = "text"
    access_log: bool = False
    # The run journal (docs/operations.md, "Run journal"): off by default.
    state_dir: str = ""
    state_keep: int = 1000
    # The shared run state (docs/operations.md, "Several replicas"): PostgreSQL, off by default.
    state_url: str = ""
    state_url_file: str = ""
    state_lease: float = 30.0
    state_grace: float = 10.0
    state_done_age: float = 600.0
    state_replica: str = ""
    # The run history and the admin listener (docs/history.md): off by default.
    admin_addr: str = ""
    admin_token_file: str = ""
    admin_insecure: bool = False
    history_output: int = 64 << 10
    state_keep_age: float = 0.0

    @property
    def log_enabled(self) -> bool:
        """webhook logs only with -verbose; -debug and -logfile imply it."""
        return self.verbose or self.debug or bool(self.logfile)

    @property
    def hooks_files(self) -> tuple[str, ...]:
        """Without -hooks, webhook reads hooks.json from the working directory."""
        return self.hooks or ("hooks.json",)

    @property
    def hooks_base(self) -> str:
        """The path before a hook's id, without its last slash: `/hooks` for -urlprefix hooks, "" for none."""
        return f"/{self.urlprefix}" if self.urlprefix else ""

    @property
    def body_limit(self) -> int | None:
        """-max-body-size in bytes, or None for no limit (0)."""
        return self.max_body_size if self.max_body_size > 0 else None

    @property
    def allowed_methods(self) -> tuple[str, ...]:
        """The global -http-methods, cleaned as webhook cleans it (spaces dropped, upper-cased)."""
        cleaned = self.http_methods.replace(" ", "").upper()
        return tuple(cleaned.split(",")) if cleaned else ()
