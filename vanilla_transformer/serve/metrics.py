"""The server's Prometheus metrics (prometheus_client), one registry per app, served at GET /metrics."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# batch sizes in sentences, and seconds of a request / an engine call
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServeMetrics:
    """Requests by route and status, their latency, and the batches the engine ran."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("vt_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("vt_request_seconds", "Seconds from a request's arrival to its answer, by route",
                                 ["route"], buckets=SECONDS_BUCKETS, registry=self.registry)
        self.sentences = Counter("vt_sentences", "Sentences translated", registry=self.registry)
        self.batch_sentences = Histogram("vt_batch_sentences", "Sentences in one engine call",
                                         buckets=SIZE_BUCKETS, registry=self.registry)
        self.batch_tokens = Histogram("vt_batch_tokens", "Source tokens in one engine call",
                                      buckets=tuple(8 * size for size in SIZE_BUCKETS), registry=self.registry)
        self.engine_seconds = Histogram("vt_engine_seconds", "Seconds of one engine call",
                                        buckets=SECONDS_BUCKETS, registry=self.registry)
        self.engine_failures = Counter("vt_engine_failures", "Engine calls that failed and restarted the engine",
                                       registry=self.registry)
        self.queued = Gauge("vt_queued_sentences", "Sentences waiting for the engine", registry=self.registry)

    def text(self) -> bytes:
        """The Prometheus text exposition format of every metric."""
        return generate_latest(self.registry)


__all__ = ["ServeMetrics"]
