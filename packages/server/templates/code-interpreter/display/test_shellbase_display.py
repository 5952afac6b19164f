"""Tests of shellbase_display: charts of real matplotlib figures, data of real DataFrames, and the
formatters in a real IPython InteractiveShell. Run from anywhere with Debian's Python:
    /usr/bin/python3 -m unittest -v test_shellbase_display   (in this folder)
IPython's and matplotlib's state directories live in a temporary folder removed at exit.
"""

import atexit
import contextlib
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = tempfile.mkdtemp(prefix="shellbase-display-test-")
# At exit rather than in tearDownModule: run as a script, this module is __main__, which IPython's
# shell replaces in sys.modules, so unittest no longer finds a tearDownModule there. Exit handlers
# run last-registered first, so IPython's own (registered later) are done before this one.
atexit.register(shutil.rmtree, STATE, ignore_errors=True)
os.environ["IPYTHONDIR"] = os.path.join(STATE, "ipython")
os.environ["MPLCONFIGDIR"] = os.path.join(STATE, "matplotlib")
sys.path.insert(0, HERE)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import shellbase_display  # noqa: E402
from shellbase_display import chart_of, data_of  # noqa: E402


def described(fig):
    """chart_of(fig), checked to be strict JSON (no NaN, only plain types)."""
    chart = chart_of(fig)
    json.dumps(chart, allow_nan=False)
    return chart


class FigureCase(unittest.TestCase):
    def tearDown(self):
        plt.close("all")


class LineChartTest(FigureCase):
    def test_series_labels_points_and_axes(self):
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [10, 20, 15], label="speed")
        ax.plot([0, 1, 2], [5, 6, float("nan")], label="wind")
        ax.axhline(12)  # drawn in axes coordinates along y: not a series
        ax.set_xlabel("Time (s)")
        ax.set_ylabel("Distance [km]")
        ax.set_title("Run")
        chart = described(fig)
        self.assertEqual(chart["type"], "line")
        self.assertEqual(chart["title"], "Run")
        self.assertEqual((chart["x_label"], chart["x_unit"]), ("Time (s)", "s"))
        self.assertEqual((chart["y_label"], chart["y_unit"]), ("Distance [km]", "km"))
        self.assertEqual((chart["x_scale"], chart["y_scale"]), ("linear", "linear"))
        self.assertEqual(chart["elements"], [
            {"label": "speed", "points": [[0.0, 10.0], [1.0, 20.0], [2.0, 15.0]]},
            {"label": "wind", "points": [[0.0, 5.0], [1.0, 6.0]]},
        ])

    def test_ticks_are_those_in_view_with_their_labels(self):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1.2])
        ax.set_xticks([0, 0.5, 1, 1.5], ["zero", "half", "one", "out of view"])
        ax.set_xlim(0, 1)
        chart = described(fig)
        self.assertEqual(chart["x_ticks"], [0.0, 0.5, 1.0])
        self.assertEqual(chart["x_tick_labels"], ["zero", "half", "one"])
        self.assertEqual(len(chart["y_ticks"]), len(chart["y_tick_labels"]))
        self.assertIn(1.2, chart["y_ticks"])  # not 1.2000000000000002

    def test_log_scale_and_label_without_unit(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [1, 100, 10000])
        ax.set_yscale("log")
        ax.set_ylabel("f(x)")
        chart = described(fig)
        self.assertEqual(chart["y_scale"], "log")
        self.assertIsNone(chart["y_unit"])
        self.assertIsNone(chart["title"])


class ScatterChartTest(FigureCase):
    def test_offsets_of_each_collection(self):
        fig, ax = plt.subplots()
        ax.scatter([1, 2], [3, 4], label="a")
        ax.scatter([5], [6], label="b")
        chart = described(fig)
        self.assertEqual(chart["type"], "scatter")
        self.assertEqual(chart["elements"], [
            {"label": "a", "points": [[1.0, 3.0], [2.0, 4.0]]},
            {"label": "b", "points": [[5.0, 6.0]]},
        ])
        self.assertIn("x_ticks", chart)

    def test_lines_with_scatter_are_a_scatter_of_all_series(self):
        fig, ax = plt.subplots()
        ax.scatter([1, 2, 3], [1, 2, 2], label="data")
        ax.plot([1, 3], [1, 2.5], label="fit")
        chart = described(fig)
        self.assertEqual(chart["type"], "scatter")
        self.assertEqual(sorted(e["label"] for e in chart["elements"]), ["data", "fit"])

    def test_categorical_axis_gives_category_names(self):
        fig, ax = plt.subplots()
        ax.scatter(["mon", "tue"], [1, 2])
        chart = described(fig)
        self.assertEqual(chart["x_scale"], "categorical")
        self.assertEqual(chart["elements"][0]["points"], [["mon", 1.0], ["tue", 2.0]])
        self.assertEqual(chart["x_ticks"], ["mon", "tue"])


class BarChartTest(FigureCase):
    def test_vertical_bars_of_categories(self):
        fig, ax = plt.subplots()
        ax.bar(["apples", "pears"], [3, 5], label="2024")
        ax.set_ylabel("Weight (kg)")
        chart = described(fig)
        self.assertEqual(chart["type"], "bar")
        self.assertEqual(chart["y_unit"], "kg")
        self.assertEqual(chart["elements"], [
            {"label": "apples", "group": "2024", "value": 3.0},
            {"label": "pears", "group": "2024", "value": 5.0},
        ])

    def test_horizontal_bars_have_widths_as_values(self):
        fig, ax = plt.subplots()
        ax.barh(["x", "y"], [7, -2], label="h")
        chart = described(fig)
        self.assertEqual(chart["elements"], [
            {"label": "x", "group": "h", "value": 7.0},
            {"label": "y", "group": "h", "value": -2.0},
        ])

    def test_grouped_bars_are_named_by_the_tick_beside_them(self):
        frame = pd.DataFrame({"men": [20, 35], "women": [25, 32]}, index=["G1", "G2"])
        ax = frame.plot.bar()
        chart = described(ax.figure)
        self.assertEqual(chart["elements"], [
            {"label": "G1", "group": "men", "value": 20.0},
            {"label": "G2", "group": "men", "value": 35.0},
            {"label": "G1", "group": "women", "value": 25.0},
            {"label": "G2", "group": "women", "value": 32.0},
        ])

    def test_histogram_bins_are_named_by_their_centres(self):
        fig, ax = plt.subplots()
        ax.hist([1, 2, 2, 3, 3, 3], bins=[0.5, 1.5, 2.5, 3.5])
        chart = described(fig)
        self.assertEqual([(e["label"], e["value"]) for e in chart["elements"]], [("1", 1.0), ("2", 2.0), ("3", 3.0)])


class PieChartTest(FigureCase):
    def test_wedges(self):
        fig, ax = plt.subplots()
        ax.pie([1, 1, 2], labels=["a", "b", "c"], radius=1.5)
        ax.set_title("Share")
        chart = described(fig)
        self.assertEqual(chart["type"], "pie")
        self.assertEqual(chart["title"], "Share")
        self.assertEqual([e["label"] for e in chart["elements"]], ["a", "b", "c"])
        self.assertEqual([round(e["angle"], 3) for e in chart["elements"]], [90.0, 90.0, 180.0])
        self.assertEqual({e["radius"] for e in chart["elements"]}, {1.5})
        self.assertNotIn("x_label", chart)


class BoxAndWhiskerTest(FigureCase):
    DATA = [[1, 2, 3, 4, 5, 20], [2, 3, 4]]
    EXPECTED = [
        {"label": "A", "min": 1.0, "first_quartile": 2.25, "median": 3.5, "third_quartile": 4.75, "max": 5.0,
         "outliers": [20.0]},
        {"label": "B", "min": 2.0, "first_quartile": 2.5, "median": 3.0, "third_quartile": 3.5, "max": 4.0,
         "outliers": []},
    ]

    def test_statistics_of_each_box(self):
        fig, ax = plt.subplots()
        ax.boxplot(self.DATA, labels=["A", "B"])
        ax.set_ylabel("Latency (ms)")
        chart = described(fig)
        self.assertEqual(chart["type"], "box_and_whisker")
        self.assertEqual(chart["y_unit"], "ms")
        self.assertEqual(chart["elements"], self.EXPECTED)

    def test_every_style_of_box_gives_the_same_statistics(self):
        styles = [dict(vert=False), dict(patch_artist=True), dict(notch=True), dict(showmeans=True),
                  dict(showmeans=True, meanline=True), dict(showcaps=False, showbox=False)]
        for style in styles:
            with self.subTest(**style):
                fig, ax = plt.subplots()
                ax.boxplot(self.DATA, labels=["A", "B"], **style)
                self.assertEqual(described(fig)["elements"], self.EXPECTED)

    def test_mean_without_outliers_is_not_an_outlier(self):
        fig, ax = plt.subplots()
        ax.boxplot(self.DATA, labels=["A", "B"], showmeans=True, showfliers=False)
        self.assertEqual([e["outliers"] for e in described(fig)["elements"]], [[], []])

    def test_pandas_box_plot_names_boxes_by_column(self):
        ax = pd.DataFrame({"v": [1, 2, 3], "w": [2, 3, 4]}).plot.box()
        chart = described(ax.figure)
        self.assertEqual([(e["label"], e["median"]) for e in chart["elements"]], [("v", 2.0), ("w", 3.0)])

    def test_other_lines_make_it_no_box_plot(self):
        fig, ax = plt.subplots()
        ax.boxplot(self.DATA)
        ax.plot([1, 2], [10, 12], label="trend")
        self.assertNotEqual(described(fig)["type"], "box_and_whisker")


class SuperchartTest(FigureCase):
    def test_each_axes_with_content_is_an_element(self):
        fig, axes = plt.subplots(2, 2)
        axes[0][0].plot([1, 2], [3, 4])
        axes[0][1].bar(["a"], [1])
        axes[1][0].pie([1, 2])
        image = axes[1][1].imshow([[1, 2], [3, 4]])
        fig.colorbar(image)  # a colorbar's Axes is not a chart
        fig.suptitle("Dashboard")
        chart = described(fig)
        self.assertEqual(chart["type"], "superchart")
        self.assertEqual(chart["title"], "Dashboard")
        self.assertEqual([e["type"] for e in chart["elements"]], ["line", "bar", "pie", "unknown"])

    def test_one_axes_with_content_is_that_chart_titled_by_the_figure(self):
        fig, axes = plt.subplots(1, 2)
        axes[1].plot([1, 2])
        fig.suptitle("Only one")
        chart = described(fig)
        self.assertEqual((chart["type"], chart["title"]), ("line", "Only one"))


class DateAxisTest(FigureCase):
    def test_matplotlib_dates_are_iso_strings(self):
        fig, ax = plt.subplots()
        days = [datetime.datetime(2024, 3, d) for d in (1, 2, 3)]
        ax.plot(days, [1, 2, 3])
        chart = described(fig)
        self.assertEqual(chart["x_scale"], "datetime")
        self.assertEqual(chart["elements"][0]["points"],
                         [["2024-03-01T00:00:00", 1.0], ["2024-03-02T00:00:00", 2.0], ["2024-03-03T00:00:00", 3.0]])
        self.assertTrue(chart["x_ticks"])
        for tick in chart["x_ticks"]:
            self.assertTrue("2024-03-01T00:00:00" <= tick <= "2024-03-03T00:00:00", tick)

    def test_timezone_aware_dates_keep_their_offset(self):
        fig, ax = plt.subplots()
        ax.plot(pd.date_range("2024-03-01", periods=2, freq="D", tz="Europe/Paris"), [1, 2])
        points = described(fig)["elements"][0]["points"]
        self.assertEqual(points[0][0], "2024-03-01T00:00:00+01:00")

    def test_pandas_datetime_index_is_read_back_as_dates(self):
        frame = pd.DataFrame({"temp": [3.5, 4.0]}, index=pd.date_range("2024-01-01", periods=2, freq="D"))
        chart = described(frame.plot().figure)
        self.assertEqual(chart["x_scale"], "datetime")
        self.assertEqual(chart["elements"], [
            {"label": "temp", "points": [["2024-01-01T00:00:00", 3.5], ["2024-01-02T00:00:00", 4.0]]}])

    def test_bars_on_dates_are_named_by_their_date(self):
        fig, ax = plt.subplots()
        ax.bar([datetime.date(2024, 5, 1), datetime.date(2024, 5, 2)], [1, 2])
        self.assertEqual([e["label"] for e in described(fig)["elements"]],
                         ["2024-05-01T00:00:00", "2024-05-02T00:00:00"])


class UnknownChartTest(FigureCase):
    def test_image_polar_and_empty_figures(self):
        fig, ax = plt.subplots()
        ax.imshow(np.eye(3))
        self.assertEqual(described(fig), {"type": "unknown", "title": None, "elements": []})
        fig = plt.figure()
        fig.add_subplot(projection="polar").plot([0, 1], [1, 2])
        self.assertEqual(described(fig)["type"], "unknown")
        self.assertEqual(described(plt.figure())["type"], "unknown")

    def test_what_cannot_be_read_is_unknown_not_an_error(self):
        self.assertEqual(chart_of(object())["type"], "unknown")
        fig, axes = plt.subplots(1, 2)
        axes[0].plot([1, 2])
        axes[1].plot([3, 4])
        with mock.patch.object(type(axes[1]), "get_xscale", side_effect=RuntimeError("broken")):
            chart = described(fig)
        self.assertEqual([e["type"] for e in chart["elements"]], ["unknown", "unknown"])


class DataFrameTest(unittest.TestCase):
    def test_columns_become_json_safe_lists(self):
        frame = pd.DataFrame({
            "x": [1.5, np.nan, np.inf],
            "when": [pd.Timestamp("2024-01-02 03:04:05"), pd.NaT, pd.Timestamp("2024-01-03", tz="UTC")],
            "n": pd.array([1, None, 3], dtype="Int64"),
            "count": np.array([1, 2, 3], dtype=np.int64),
            "flag": [True, False, None],
            "took": [pd.Timedelta(days=1, seconds=2.5), pd.NaT, pd.Timedelta(0)],
            7: ["a", None, "c"],
        }, index=["r1", "r2", "r3"])
        data = data_of(frame)
        self.assertEqual(data, {
            "x": [1.5, None, None],
            "when": ["2024-01-02T03:04:05", None, "2024-01-03T00:00:00+00:00"],
            "n": [1, None, 3],
            "count": [1, 2, 3],
            "flag": [True, False, None],
            "took": ["P1DT0H0M2.5S", None, "P0DT0H0M0S"],
            "7": ["a", None, "c"],
        })
        self.assertIs(type(data["count"][0]), int)
        json.dumps(data, allow_nan=False)

    def test_an_empty_frame_has_its_columns(self):
        self.assertEqual(data_of(pd.DataFrame({"a": [], "b": []})), {"a": [], "b": []})


class RegisterTest(FigureCase):
    @classmethod
    def setUpClass(cls):
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.core.pylabtools import select_figure_formats
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.hist_file = ":memory:"  # nothing left behind, nothing written at exit
        cls.ip = InteractiveShell.instance(config=config)
        cls.registered = shellbase_display.register(cls.ip)
        # What the inline backend does whenever it is configured: it clears every formatter's
        # printer for Figure, then gives image/png one.
        select_figure_formats(cls.ip, {"png"})

    def format(self, obj):
        data, _metadata = self.ip.display_formatter.format(obj)
        return data

    def test_registers_both_mime_types(self):
        self.assertEqual(self.registered, ["e2b/chart", "e2b/data"])

    def test_a_figure_gets_its_chart_beside_png_and_text(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4], label="l")
        data = self.format(fig)
        self.assertTrue({"text/plain", "image/png", "e2b/chart"} <= set(data), sorted(data))
        self.assertEqual(data["e2b/chart"]["type"], "line")
        self.assertEqual(data["e2b/chart"]["elements"][0]["points"], [[1.0, 3.0], [2.0, 4.0]])

    def test_a_dataframe_gets_its_data_beside_html_and_text(self):
        data = self.format(pd.DataFrame({"a": [1.0, np.nan]}))
        self.assertTrue({"text/plain", "text/html", "e2b/data"} <= set(data), sorted(data))
        self.assertEqual(data["e2b/data"], {"a": [1.0, None]})

    def test_other_objects_get_neither(self):
        self.assertEqual(set(self.format([1, 2])), {"text/plain"})

    def test_display_and_a_cells_value_carry_the_chart(self):
        from IPython.utils.capture import capture_output

        self.ip.user_ns["fig"], ax = plt.subplots()
        ax.bar(["a"], [1])
        with capture_output() as captured:
            result = self.ip.run_cell("display(fig)")
        self.assertTrue(result.success)
        self.assertEqual(captured.outputs[0].data["e2b/chart"]["type"], "bar")
        value, _ = self.ip.displayhook.compute_format_data(self.ip.user_ns["fig"])
        self.assertEqual(value["e2b/chart"]["type"], "bar")

    def test_a_failing_description_is_left_out_silently(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2])
        out = io.StringIO()
        with mock.patch("shellbase_display.charts.chart_of", side_effect=RuntimeError("broken")), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            data = self.format(fig)
        self.assertNotIn("e2b/chart", data)
        self.assertIn("image/png", data)
        self.assertEqual(out.getvalue(), "")

    def test_registering_again_replaces_the_formatters(self):
        shellbase_display.register(self.ip)
        formatters = self.ip.display_formatter.formatters
        self.assertEqual(sum(1 for mime in formatters if mime.startswith("e2b/")), 2)
        self.assertEqual(self.format(pd.DataFrame({"a": [1]}))["e2b/data"], {"a": [1]})


MISSING = """
import importlib.machinery, json, sys
sys.path.insert(0, {here!r})


class PathFinderWithout:  # the file system's finder, blind to the missing libraries
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {missing!r}:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)


sys.meta_path = [PathFinderWithout() if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
import shellbase_display
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
mimes = shellbase_display.register(ip)
bundle, _ = ip.display_formatter.format({{"k": 1}})
chart = None
try:
    import pandas
    raise SystemExit("pandas was found")
except ModuleNotFoundError:
    pass
if "matplotlib" not in {missing!r}:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, ax = plt.subplots()
    ax.plot([1, 2])
    chart = ip.display_formatter.format(figure)[0].get("e2b/chart", {{}}).get("type")
print(json.dumps({{"mimes": mimes, "plain": sorted(bundle), "chart": chart}}))
"""


class MissingLibraryTest(unittest.TestCase):
    def run_without(self, *missing):
        script = MISSING.format(here=HERE, missing=list(missing))
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def test_without_matplotlib_and_pandas_nothing_is_registered(self):
        got = self.run_without("matplotlib", "pandas", "numpy")
        self.assertEqual(got, {"mimes": [], "plain": ["text/plain"], "chart": None})

    def test_without_pandas_charts_still_work(self):
        got = self.run_without("pandas")
        self.assertEqual(got, {"mimes": ["e2b/chart"], "plain": ["text/plain"], "chart": "line"})



class FastPathsTest(unittest.TestCase):
    """shellbase_display.fast_paths on Debian's ipykernel and jupyter_client (the template's)."""

    @classmethod
    def setUpClass(cls):
        from shellbase_display import fast_paths

        cls.applied = fast_paths.install()
        cls.again = fast_paths.install()

    def test_every_piece_applies_once(self):
        # "log" needs a running kernel's logger: `test_a_kernel_logger_makes_no_records_it_would_drop`.
        self.assertEqual(sorted(self.applied), ["cell_id", "dates", "flush", "formatters"])
        self.assertEqual(self.again, [])

    def test_a_flush_sends_what_was_written_and_nothing_when_nothing_was(self):
        import zmq
        from ipykernel.iostream import IOPubThread, OutStream
        from jupyter_client.session import Session

        context = zmq.Context()
        pub, sub = context.socket(zmq.PUB), context.socket(zmq.SUB)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        sub.connect(f"tcp://127.0.0.1:{port}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        thread = IOPubThread(pub)
        thread.start()
        stream = OutStream(Session(key=b""), thread, "stdout", watchfd=False)
        scheduled = []
        schedule = thread.schedule
        thread.schedule = lambda f: (scheduled.append(f), schedule(f))[1]
        try:
            # A subscriber misses what is published before it is connected: wait until one message gets through.
            for _ in range(50):
                stream.write("ping\n")
                stream.flush()
                if sub.poll(100):
                    break
            while sub.poll(100):
                sub.recv_multipart()
            scheduled.clear()
            stream.flush()
            self.assertEqual(scheduled, [], "nothing written: nothing handed to the IOPub thread")
            self.assertEqual(sub.poll(200), 0)
            stream.write("hello\n")
            stream.flush()
            self.assertTrue(sub.poll(2000))
            self.assertIn(b"hello", b"".join(sub.recv_multipart()))
        finally:
            thread.schedule = schedule
            stream.pub_thread = None  # OutStream.close() of ipykernel 6.17 fails on a stream that watches no fd
            thread.stop()
            thread.close()
            sub.close()
            context.term()

    def test_incoming_dates_stay_strings(self):
        from jupyter_client.session import Session

        session = Session(key=b"k")
        msg = session.msg("execute_request", content={"code": "1"}, parent={"msg_id": "p", "date": "2026-12-06T07:00:00.000000Z"})
        wire = session.serialize(msg)
        got = session.deserialize(wire[wire.index(b"<IDS|MSG>") + 1:])
        self.assertIsInstance(got["header"]["date"], str)
        self.assertEqual(got["parent_header"]["date"], "2026-12-06T07:00:00.000000Z")
        self.assertEqual(got["content"], {"code": "1"})

    def test_whether_run_cell_takes_a_cell_id_is_asked_once_per_method(self):
        from ipykernel import ipkernel

        class Shell:
            def with_id(self, code, *, cell_id=None):
                pass

            def without(self, code):
                pass

        shell = Shell()
        self.assertTrue(ipkernel._accepts_cell_id(shell.with_id))
        self.assertFalse(ipkernel._accepts_cell_id(shell.without))
        with mock.patch("inspect.signature", side_effect=AssertionError("asked again")):
            self.assertTrue(ipkernel._accepts_cell_id(Shell().with_id))
            self.assertFalse(ipkernel._accepts_cell_id(shell.without))

    def test_formatters_are_called_directly_and_format_and_fail_as_before(self):
        from IPython.core import formatters
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        display = shell.display_formatter
        self.assertTrue(all(getattr(type(f).__call__, "_shellbase", False)
                            for f in display.formatters.values() if hasattr(type(f).__call__, "__wrapped__")))
        self.assertTrue(getattr(formatters.MimeBundleFormatter.__call__, "_shellbase", False))

        class Rich:
            def _repr_html_(self):
                return "<b>rich</b>"

            def _repr_markdown_(self):
                raise ValueError("broken repr")

            def _repr_latex_(self):
                raise NotImplementedError

            def __repr__(self):
                return "Rich()"

        with mock.patch.object(shell, "showtraceback") as shown:
            data, _ = display.format(Rich())
        self.assertEqual(data, {"text/plain": "Rich()", "text/html": "<b>rich</b>"})
        # The failing repr is reported as before (a traceback shown, no text/markdown); NotImplementedError silently.
        self.assertEqual(shown.call_count, 1)
        self.assertIsInstance(shown.call_args[0][0][1], ValueError)
        self.assertEqual(display.formatters["text/plain"](2), "2")
        self.assertEqual(display.formatters["text/plain"](obj=3), "3")  # by keyword: the decorator's way
        self.assertEqual(display.mimebundle_formatter(Rich(), include=None, exclude=None), ({}, {}))

    def test_a_kernel_logger_makes_no_records_it_would_drop(self):
        import logging
        from shellbase_display import fast_paths

        def logger(name, level, handler_levels, propagate=False):
            log = logging.getLogger(f"shellbase-test-{name}")
            log.setLevel(level)
            log.propagate = propagate
            log.handlers = [logging.NullHandler(lv) for lv in handler_levels]
            return log

        dropped = logger("dropped", logging.DEBUG, [logging.WARNING, logging.ERROR])
        self.assertTrue(fast_paths._quiet_log(dropped))
        self.assertEqual(dropped.level, logging.WARNING)
        self.assertFalse(dropped.isEnabledFor(logging.DEBUG))
        for log in (logger("propagates", logging.DEBUG, [logging.WARNING], propagate=True),
                    logger("handles-all", logging.DEBUG, [logging.WARNING, logging.NOTSET]),
                    logger("no-handlers", logging.DEBUG, [])):
            self.assertFalse(fast_paths._quiet_log(log), log.name)
            self.assertEqual(log.level, logging.DEBUG, log.name)


if __name__ == "__main__":
    unittest.main()
