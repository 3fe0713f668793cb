# steamharness: serves workflow projects as MCP servers.
# `docker run -i IMAGE mcp /app/examples/interactive` speaks MCP over stdio.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STEAMHARNESS_DATA_DIR=/data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webui ./webui
COPY templates ./templates
COPY static ./static
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --create-home steamharness && mkdir -p /data && chown steamharness /data
USER steamharness
VOLUME ["/data"]
ENTRYPOINT ["steamharness"]
CMD ["mcp", "/app/examples/interactive"]
