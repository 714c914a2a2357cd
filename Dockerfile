# streameval: the worker, the simulator and the alert-log receiver in one image.
#   docker build -t streameval:0.1.0 .        (docker compose up builds it too)
#   docker run --rm streameval:0.1.0 worker --help

# The compiled kernels (pipeline/kernels, Rust through maturin) as a wheel: built on the full
# Debian image, which has the C linker Rust needs, with the Rust toolchain of the official image
FROM python:3.11-bookworm AS kernels
COPY --from=rust:1.95-bookworm /usr/local/cargo /usr/local/cargo
COPY --from=rust:1.95-bookworm /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo \
    RUSTUP_HOME=/usr/local/rustup \
    PATH=/usr/local/cargo/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pipeline/kernels /src/kernels
RUN pip wheel --no-deps --wheel-dir /wheels /src/kernels

FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STREAMEVAL_STATE_DIR=/var/lib/streameval

WORKDIR /opt/streameval
# the dependencies first, so that a code change does not reinstall them
COPY pyproject.toml README.md ./
COPY pipeline/streameval/__init__.py pipeline/streameval/__init__.py
RUN pip install . && pip uninstall --yes streameval
COPY pipeline pipeline
COPY topics topics
RUN --mount=type=bind,from=kernels,source=/wheels,target=/wheels \
    pip install --no-deps . /wheels/*.whl \
    && groupadd --system --gid 10001 streameval \
    && useradd --system --uid 10001 --gid 10001 --home-dir /opt/streameval streameval \
    && mkdir -p /var/lib/streameval && chown 10001:10001 /var/lib/streameval

# the join's disk stores (pending instances waiting for labels): give it a volume that outlives
# the container, or each new container rebuilds them from the changelog
VOLUME /var/lib/streameval
USER 10001:10001
EXPOSE 9464
ENTRYPOINT ["streameval"]
CMD ["worker"]
