import pytest

from ccsynth.errors import SizeError
from ccsynth.units import format_size, parse_size, parse_sizes


def test_parse_and_format():
    assert parse_size("1K") == 1024 and parse_size("64M") == 64 << 20 and parse_size("8") == 8
    assert parse_size("1.5K") == 1536 and parse_size("2GiB") == 2 << 30
    assert format_size(1 << 30) == "1G" and format_size(1536) == "1536"


def test_ranges():
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    assert parse_sizes("3:10") == [4, 8, 10]
    assert parse_sizes("1K,1M") == [1024, 1 << 20]
    assert len(parse_sizes("1K:1G")) == 21


@pytest.mark.parametrize("bad", ["", "1Q", "-5", "abc", "0.5"])
def test_bad_sizes(bad):
    with pytest.raises(SizeError):
        parse_size(bad)


def test_bad_range():
    with pytest.raises(SizeError, match="above maximum"):
        parse_sizes("1M:1K")
