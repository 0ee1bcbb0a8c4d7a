# The Pathkeeper image: one image, three roles (migrate, indexer, api) chosen by command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml alembic.ini ./
COPY coordinator ./coordinator
COPY indexer ./indexer
COPY pathkeeper ./pathkeeper
COPY migrations ./migrations
RUN pip install --no-cache-dir -e .
USER nobody
ENTRYPOINT ["pathkeeper"]
