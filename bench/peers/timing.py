"""How the loader peers time an iterable of (images, labels) batches: one warm-up batch (thread
or worker start-up) not timed, then images per second over `batches` batches."""
import time


def images_per_second(loader, batches):
    it = iter(loader)
    next(it)
    start, images = time.perf_counter(), 0
    for _ in range(batches):
        x, _ = next(it)
        images += x.shape[0]
    return images / (time.perf_counter() - start)
