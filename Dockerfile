# One image for every Planloop process; docker-compose.yml picks the subcommand
# (supervisor, worker, flower, ...). Build: docker build -t planloop .
#
# Two stages: the first builds the wheel from the build context exactly as `pip wheel .` does
# in a checkout (tests/unit/test_image.py proves the context yields the checkout's wheel); the
# second installs that wheel and nothing else, so the image runs what the suite tests.
FROM python:3.11-slim AS wheel

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The wheel with the PostgreSQL driver; no source tree is kept in this stage.
COPY --from=wheel /dist /dist
RUN pip install "$(ls /dist/planloop-*.whl)[postgres]" && rm -rf /dist

# Run as an unprivileged user; its home is the working directory, so the default SQLite
# record (.planloop/planloop.db, used when PLANLOOP_DATABASE_URL is unset) is writable.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin planloop
USER planloop
WORKDIR /home/planloop

EXPOSE 5555 8765
ENTRYPOINT ["planloop"]
CMD ["--help"]
