# The image the Helm chart runs (sunk-syncer, sunk-scheduler, sunk-extender, sunk-operator;
# manifests/chart/sunk). `docker build -t sunk:0.1.0 .` where a container engine and a registry are
# at hand. These machines have neither: the dev cluster builds the equivalent image without them
# (dev/sunk_dev/images.py, docs/development.md): Debian bookworm's python3.11, a venv at /opt/sunk
# first on PATH, uid 65532, tagged docker.io/library/sunk:<version> (what the chart's default
# `sunk:<appVersion>` resolves to), imported into the real Node's containerd with `ctr`.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY sunk ./sunk
COPY scheduler ./scheduler
COPY extender ./extender
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
