"""One SparkSession and one 3-node LocalCluster shared by every spark test (both are slow to start)."""

from __future__ import annotations

import os
import sys

import pytest

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def flotilla_cluster(tmp_path_factory):
    from cli.local_cluster import LocalCluster

    # Racked, with replica_selector "rack": `kafka.client.rack` reads from the replica in the reader's rack
    # (KIP-392); a reader without a rack reads from the leader, as on any cluster. Metrics tell who served.
    cluster = LocalCluster(str(tmp_path_factory.mktemp("spark-cluster")), nodes=3, metrics=True,
                           racks={1: "rack-a", 2: "rack-b", 3: "rack-c"}, broker={"replica_selector": "rack"})
    cluster.start()
    yield cluster
    from spark.cluster import close_clients

    close_clients()
    cluster.stop()


@pytest.fixture(scope="session")
def spark_session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("flotilla-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stateStore.providerClass",
                       "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from spark import register

    register(session)
    yield session
    session.stop()
