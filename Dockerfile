# The image the Helm chart runs (sunk-syncer, sunk-scheduler, sunk-extender; manifests/chart/sunk).
# Not built in CI here (no container engine on these machines); `docker build -t sunk:0.1.0 .`
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY sunk ./sunk
COPY scheduler ./scheduler
COPY extender ./extender
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
