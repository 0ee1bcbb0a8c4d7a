# The Pathkeeper image: one image, three roles (migrate, indexer, api) chosen by command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY coordinator ./coordinator
COPY indexer ./indexer
COPY pathkeeper ./pathkeeper
COPY migrations ./migrations
# A regular (not editable) install: the migrations ship inside the package.
RUN pip install --no-cache-dir . && rm -rf /app/*
USER nobody
ENTRYPOINT ["pathkeeper"]
