# A small image for the bot. Secrets are passed at run time (docker run -e DISCORD_TOKEN -e DEEPSEEK_API_KEY).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY bot ./bot
COPY cogs ./cogs
RUN pip install . && useradd --create-home --uid 10001 bot && mkdir -p /data && chown bot:bot /data

# The image's own config, pointing the databases at the /data volume.
COPY config.toml /app/config.toml
RUN sed -i 's|^data_dir = .*|data_dir = "/data"|' /app/config.toml

USER bot
VOLUME ["/data"]
ENTRYPOINT ["python", "-m", "bot", "--config", "/app/config.toml"]
CMD ["run"]
