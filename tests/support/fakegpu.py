"""A stand-in GPU library with every kind of launch callable: a launch is a plain call.

Tests copy this file into their tmp_path and import it from there, fresh for each test.
"""

last_error = None


def launch(*args):
    """Launch a fake kernel."""
    return args


def launch_a(*args):
    return ("a", *args)


def launch_b(*args):
    return ("b", *args)


def fail(message):
    """Raise, as a launch that went wrong does."""
    global last_error
    last_error = ValueError(message)
    raise last_error


class Kernel:
    def __call__(self, *args):
        return ("call", self, *args)


class Stream:
    def launch(self, *args):
        return ("method", self, *args)

    @staticmethod
    def static_launch(*args):
        return ("static", *args)

    @classmethod
    def class_launch(cls, *args):
        return ("class", cls, *args)


class Child(Stream):
    pass


class GrandChild(Child):
    pass
