# The compatibility-matrix runner: every client of `streamgate compat run` in one image.
#   docker build -f docker/compat.Dockerfile -t streamgate-compat .
# Kafka's own tools (the Java column) come from the official Apache Kafka image.
FROM apache/kafka:3.7.0 AS kafka

FROM python:3.11-slim-bookworm
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends kcat openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=kafka /opt/kafka /opt/kafka
ENV KAFKA_HOME=/opt/kafka \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY kafkawire ./kafkawire
COPY core ./core
COPY compat ./compat
COPY harness ./harness
RUN pip install --no-cache-dir '.[compat]'
ENTRYPOINT ["streamgate", "compat", "run"]
CMD ["--bootstrap", "localhost:9092", "--against", "kafka:9092", "--output-dir", "/results"]
