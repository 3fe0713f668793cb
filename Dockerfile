# steamharness: serves workflow projects as MCP servers.
# `docker run -p 8000:8000 -e STEAMHARNESS_SERVER_ADMIN_KEY=… IMAGE` serves the demo projects;
# `docker run -i IMAGE mcp /app/examples/interactive` speaks MCP over stdio.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STEAMHARNESS_DATA_DIR=/data \
    STEAMHARNESS_EXAMPLES_DIR=/app/examples
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webui ./webui
COPY templates ./templates
COPY static ./static
COPY examples ./examples
RUN pip install --no-cache-dir -e ".[postgres]" && useradd --create-home steamharness \
    && mkdir -p /data /shared && chown steamharness /data /shared
USER steamharness
VOLUME ["/data"]
ENTRYPOINT ["steamharness"]
EXPOSE 8000
# 0.0.0.0 inside the container only; publish the port on the host as you choose.
CMD ["serve", "--demo", "--host", "0.0.0.0"]
