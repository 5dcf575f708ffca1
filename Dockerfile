# One image for every Planloop process; docker-compose.yml picks the subcommand
# (supervisor, worker, flower, ...). Build: docker build -t planloop .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A plain (non-editable) install with the PostgreSQL driver; the source tree is not kept,
# so the image runs exactly what was installed into site-packages.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY config ./config
COPY core ./core
COPY planner ./planner
COPY workers ./workers
COPY supervisor ./supervisor
COPY producer ./producer
# the public API; planloop/examples links to examples/, which ships in the package
COPY planloop ./planloop
COPY examples ./examples
RUN pip install '.[postgres]' \
    && cd / && rm -rf /src

# Run as an unprivileged user; its home is the working directory, so the default SQLite
# record (.planloop/planloop.db, used when PLANLOOP_DATABASE_URL is unset) is writable.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin planloop
USER planloop
WORKDIR /home/planloop

EXPOSE 5555 8765
ENTRYPOINT ["planloop"]
CMD ["--help"]
