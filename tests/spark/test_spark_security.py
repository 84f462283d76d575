"""The flotilla data source on a secured cluster (SASL_SSL): the `kafka.`-prefixed client security options reach
the source's and the sink's connections in the real SparkSession's Python workers; ACLs name their principal;
a wrong password fails the query with the broker's authentication error, a principal that may not describe the
topic with TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS

pytestmark = [pytest.mark.slow, pytest.mark.external]
TOPIC = "secure-spark"


def flotilla(cluster: LocalCluster, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "cli.main", *args, "-b", cluster.bootstrap_servers,
                             "--command-config", cluster.write_client_properties("admin.properties")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("spark-secure")), nodes=1, secure=True,
                           broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        from tests.net.cluster_helpers import eventually

        eventually(lambda: json.loads(flotilla(cluster, "brokers", "--json"))[0]["status"] == "active", 60,
                   what="the secured node active")
        flotilla(cluster, "users", "add", "alice", "--password", "alice-secret", "--mechanism", "SCRAM-SHA-512")
        flotilla(cluster, "topics", "create", TOPIC, "--partitions", "2", "--replication-factor", "1")
        flotilla(cluster, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", TOPIC)
        yield cluster
    finally:
        from spark.cluster import close_clients

        close_clients()
        cluster.stop()


def security_options(cluster: LocalCluster, user: str, password: str, mechanism: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cluster.bootstrap_servers, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": mechanism, "kafka.sasl.username": user, "kafka.sasl.password": password,
            "kafka.ssl.ca.location": os.path.join(cluster.certs_dir, "ca.pem")}


def test_the_sink_writes_and_the_source_reads_as_their_principals(spark_session, secured):
    rows = [(f"key-{i}", f"value-{i}") for i in range(40)]
    frame = spark_session.createDataFrame(rows, "key string, value string")
    frame.write.format("flotilla").options(**security_options(secured, "admin", secured.ADMIN_PASSWORD, "PLAIN")) \
        .option("topic", TOPIC).mode("append").save()
    read = spark_session.read.format("flotilla") \
        .options(**security_options(secured, "alice", "alice-secret", "SCRAM-SHA-512")) \
        .option("subscribe", TOPIC).option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    got = sorted((row.key.decode(), row.value.decode()) for row in read.select("key", "value").collect())
    assert got == sorted(rows)


def test_a_wrong_password_fails_the_read_with_the_brokers_answer(spark_session, secured):
    read = spark_session.read.format("flotilla") \
        .options(**security_options(secured, "alice", "wrong", "SCRAM-SHA-512")) \
        .option("subscribe", TOPIC).option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    with pytest.raises(Exception) as raised:
        read.collect()
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in str(raised.value), str(raised.value)[-2000:]


def test_a_principal_without_read_is_refused_the_topic(spark_session, secured):
    flotilla(secured, "users", "add", "bob", "--password", "bob-secret", "--mechanism", "SCRAM-SHA-512")
    read = spark_session.read.format("flotilla") \
        .options(**security_options(secured, "bob", "bob-secret", "SCRAM-SHA-512")) \
        .option("subscribe", TOPIC).option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    with pytest.raises(Exception) as raised:
        read.collect()
    assert f"option 'subscribe': not authorized to describe topic(s) ['{TOPIC}']: TOPIC_AUTHORIZATION_FAILED" in \
        str(raised.value), str(raised.value)[-2000:]
