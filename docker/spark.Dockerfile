# A Spark runner: PySpark 4.0.1 (the connector must match Spark's minor version) with Java 17.
#   docker build -f docker/spark.Dockerfile -t streamgate-spark .
FROM python:3.11-slim-bookworm
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_LOCAL_IP=127.0.0.1 \
    PYSPARK_PYTHON=python3
RUN pip install --no-cache-dir pyspark==4.0.1 pyarrow==21.0.0
WORKDIR /app
COPY docker/spark/kafka_count.py ./kafka_count.py
ENTRYPOINT ["python3", "kafka_count.py"]
