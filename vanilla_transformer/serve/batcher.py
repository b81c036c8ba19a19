"""Dynamic batching: the sentences of concurrent requests go to the engine together, each answer back to its request.

Requests put their sentences on one queue; one thread takes the first waiting sentence, then gathers more for up
to `wait_s` (or takes what is already queued) while the batch stays within `max_batch_tokens` source tokens, sorts
the batch by length and makes one engine call. A batch holds sentences that ask for the same number of hypotheses
(1, or the n best for `alternatives`: a wider beam search); a sentence that asks for another number waits for the
next batch, first in line. Each request's future is resolved on its event loop when its last
sentence is translated. The engine runs in that one thread, off the event loop, so the server keeps accepting and
answering while it works.

Faults: an engine call that raises a ValueError (an input the engine refuses) is retried request by request, so
only the request that caused it fails (400). Any other error, or an engine left unusable, fails the requests of
that batch with 503 and the engine is loaded again for the next batches. A request whose timeout passed is
answered 503 and its sentences not yet translated are dropped.
"""

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

from vanilla_transformer.serve.protocol import loggable

logger = logging.getLogger("vanilla_transformer.serve")
_STOP = object()


class TranslationError(Exception):
    """A request that cannot be answered with a translation: its HTTP `status` and one-line `message`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class _Request:
    """The sentences of one HTTP request on their way through the batcher. Written by the batcher thread only;
    the future is resolved on the request's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, count: int):
        self.loop, self.future = loop, loop.create_future()
        self.results: list = [None] * count
        self.left, self.finished = count, False

    def deliver(self, index: int, translation) -> None:
        if self.finished:
            return
        self.results[index] = translation
        self.left -= 1
        if self.left == 0:
            self.finished = True
            self.loop.call_soon_threadsafe(self._resolve, self.results, None)

    def fail(self, error: TranslationError) -> None:
        if not self.finished:
            self.finished = True
            self.loop.call_soon_threadsafe(self._resolve, None, error)

    def _resolve(self, results, error) -> None:
        if not self.future.done():  # not already given up (timeout)
            if error is None:
                self.future.set_result(results)
            else:
                self.future.set_exception(error)


@dataclass
class _Sentence:
    text: str
    tokens: int
    request: _Request
    index: int
    hypotheses: int = 1


class DynamicBatcher:
    """Batches sentences for `engine` (a `engine.TranslationEngine`) in a thread; `metrics` a `ServeMetrics`.
    `batching=False` makes one engine call per sentence (the baseline the benchmark compares with)."""

    def __init__(self, engine, metrics, *, max_batch_tokens: int = 4096, wait_s: float = 0.005,
                 batching: bool = True):
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.engine, self.metrics = engine, metrics
        self.max_batch_tokens, self.wait_s, self.batching = max_batch_tokens, wait_s, batching
        self._queue: queue.Queue = queue.Queue()
        self._held: deque = deque()  # sentences taken but left for a later batch, oldest first: taken first
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="translation-batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Translate what is queued, then end the thread."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None

    async def translate(self, sentences: list[str], tokens: list[int], timeout: float, hypotheses: int = 1) -> list:
        """The translations of `sentences` (with their token counts), or a `TranslationError`. With `hypotheses` n
        over 1, each sentence's n best translations (a list, best first) instead of its one."""
        if not sentences:
            return []
        if self._thread is None:
            raise TranslationError(503, "the server is not running its translation engine (starting or stopping)")
        request = _Request(asyncio.get_running_loop(), len(sentences))
        for index, (text, count) in enumerate(zip(sentences, tokens)):
            self._queue.put(_Sentence(text, count, request, index, hypotheses))
        self.metrics.queued.inc(len(sentences))
        try:
            return await asyncio.wait_for(request.future, timeout)
        except TimeoutError:
            request.finished = True  # the batcher drops its sentences not yet translated
            raise TranslationError(503, f"the translation took longer than this server's timeout of {timeout:g} s; "
                                        "send less text or try again later") from None

    # --- the batcher thread ---------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self.metrics.queued.dec(len(batch))
            try:
                self._run([s for s in batch if not s.request.finished])
            except Exception:  # a bug of ours: keep serving, fail the batch
                logger.exception("the batcher failed on a batch")
                for sentence in batch:
                    sentence.request.fail(TranslationError(500, "the server failed on this request (see its log)"))

    def _take(self, timeout: float | None):
        if self._held:
            return self._held.popleft()
        if timeout is None:
            return self._queue.get()
        return self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()

    def _next_batch(self) -> list[_Sentence] | None:
        first = self._take(None)
        if first is _STOP:
            return None
        batch, tokens, passed = [first], first.tokens, []
        deadline = time.monotonic() + self.wait_s
        while self.batching:
            try:
                item = self._take(deadline - time.monotonic())
            except queue.Empty:
                break
            if item is _STOP or tokens + item.tokens > self.max_batch_tokens:
                passed.append(item)
                break
            if item.hypotheses != first.hypotheses:  # another kind of engine call: a later batch
                passed.append(item)
                continue
            batch.append(item)
            tokens += item.tokens
        self._held.extendleft(reversed(passed))  # before those still held: they were taken from there first
        return batch

    def _run(self, batch: list[_Sentence]) -> None:
        if not batch:
            return
        batch.sort(key=lambda sentence: sentence.tokens, reverse=True)
        started = time.perf_counter()
        texts, hypotheses = [sentence.text for sentence in batch], batch[0].hypotheses
        try:
            translations = (self.engine.translate(texts) if hypotheses == 1 else
                            self.engine.hypotheses(texts, hypotheses))
        except Exception as error:
            self._recover(batch, error)
            return
        self.metrics.engine_seconds.observe(time.perf_counter() - started)
        self.metrics.batch_sentences.observe(len(batch))
        self.metrics.batch_tokens.observe(sum(sentence.tokens for sentence in batch))
        self.metrics.sentences.inc(len(batch))
        for sentence, translation in zip(batch, translations, strict=True):
            sentence.request.deliver(sentence.index, translation)

    def _recover(self, batch: list[_Sentence], error: Exception) -> None:
        """After a failed engine call: find the request at fault, or restart a broken engine."""
        message = " ".join(str(error).split()) or type(error).__name__
        requests = list({id(sentence.request): sentence.request for sentence in batch}.values())
        if isinstance(error, ValueError) and self.engine.is_usable():
            if len(requests) == 1:
                requests[0].fail(TranslationError(400, f"the engine cannot translate this text: {message}"))
                return
            for request in requests:  # each alone: only the one at fault fails
                self._run([sentence for sentence in batch if sentence.request is request])
            return
        logger.error("the engine failed on a batch of %d sentences from %d requests (%s); loading it again",
                     len(batch), len(requests), loggable(message))
        self.metrics.engine_failures.inc()
        for request in requests:
            request.fail(TranslationError(503, "the translation engine failed while translating this request and "
                                               "was restarted; send it again"))
        try:
            self.engine.restart()
        except Exception as restart_error:  # the next batches will fail (503) and try again
            logger.error("the engine could not be loaded again: %s", loggable(" ".join(str(restart_error).split())))


__all__ = ["DynamicBatcher", "TranslationError"]
