"""zeroshard._ports.quiet_port: rendezvous ports below the ephemeral range
(the C++ twin's test is //common:quiet_port_test)."""

import socket
import unittest

from zeroshard._ports import ephemeral_range, quiet_port


class EphemeralRangeTest(unittest.TestCase):
    def test_reads_two_numbers(self):
        self.assertEqual(ephemeral_range("32768\t60999\n"), (32768, 60999))
        self.assertEqual(ephemeral_range("40000 50000"), (40000, 50000))

    def test_nonsense_is_linux_default(self):
        for text in ["", "50000 40000", "0 100", "1 70000", "a b", "1 2 3"]:
            self.assertEqual(ephemeral_range(text), (32768, 60999), text)


class QuietPortTest(unittest.TestCase):
    def test_pair_is_bindable_and_below_the_range(self):
        first = ephemeral_range()[0]
        for _ in range(20):
            p = quiet_port(count=2)
            if first - 10000 >= 1024:
                self.assertGreaterEqual(p, first - 10000)
                self.assertLess(p + 1, first)
            # Both can be listened on now (this test holds neither).
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
                a.listen()
                b.listen()


if __name__ == "__main__":
    unittest.main()
