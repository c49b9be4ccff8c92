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


def epochs_images_per_second(loader, epochs):
    """Images per second over `epochs` whole epochs of a loader with set_epoch(), the first batch
    not timed; and the number of batches timed."""
    start, images, batches = None, 0, 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for x, _ in loader:
            if start is None:
                start = time.perf_counter()
                continue
            images += x.shape[0]
            batches += 1
    return images / (time.perf_counter() - start), batches
