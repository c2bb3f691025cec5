"""Written forms over HTTP: a sample of each kind (tests/text/written_forms.tsv has them all, read without a server)
read by the served reader, `date_order` and `number_and` from a request's parameters and from the OpenAI routes' extra
body fields, and a bad `date_order` refused with a message that says what to send."""

from __future__ import annotations

import httpx
import pytest

SAMPLES = [
    ("March 3, 2021", "march third twenty twenty one"),
    ("Born 3 March 2021.", "born the third of march twenty twenty one"),
    ("2024-06-10", "june tenth twenty twenty four"),
    ("123", "one hundred twenty three"),
    ("21st", "twenty first"),
    ("rated 4.0 stars", "rated four point zero stars"),
    ("3 1/4", "three and a quarter"),
    ("$0.75/hr", "seventy five cents per hour"),
    ("2 tsp", "two teaspoons"),
    ("2:15:30", "two hours fifteen minutes and thirty seconds"),
    ("(212)-555-0147", "two one two five five five oh one four seven"),
    ("221B Baker St.", "two twenty one b baker street"),
    ("<https://example.org>", "h t t p s colon slash slash example dot org"),
    ("UA123", "u a one two three"),
    ("10-15", "ten to fifteen"),
    ("7-3=4", "seven minus three equals four"),
    ("Henry VIII", "henry the eighth"),
    ("Acme Inc.", "acme incorporated"),
    ("JSON", "json"),
    ("PIN 0042", "pin zero zero four two"),
    ("cats & dogs", "cats and dogs"),
]


def words(url: str, inputs: str, **parameters) -> list[str]:
    body = {"inputs": inputs, "parameters": {"details": True, "max_new_tokens": 4, **parameters}}
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return [w["word"] for w in r.json()["details"]["words"]]


@pytest.mark.parametrize(("written", "spoken"), SAMPLES)
def test_each_kind_of_written_form_is_read_over_http(url, written, spoken):
    assert words(url, written) == spoken.split()


def test_date_order_orders_a_numeric_date(url):
    assert words(url, "03/04/2021") == "march fourth twenty twenty one".split()
    assert words(url, "03/04/2021", date_order="dmy") == "the third of april twenty twenty one".split()
    assert words(url, "21/03/04", date_order="ymd") == "march fourth twenty one".split()


def test_telephone_groups_keep_their_pauses_with_punctuation(url):
    got = words(url, "(212) 555-0147", punctuation=True)
    assert got == "two one two , five five five , oh one four seven".split()


def test_a_bad_date_order_is_a_422_that_names_the_choices(url):
    r = httpx.post(url + "/generate", json={"inputs": "12/25/2023", "parameters": {"date_order": "dym"}}, timeout=30)
    assert r.status_code == 422, r.text
    assert "date_order" in r.text and "mdy" in r.text


def test_openai_routes_take_date_order_as_an_extra_body_field(url):
    body = {"model": "g2p-tiny", "prompt": "03/04/2021", "date_order": "dmy", "max_tokens": 4}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"].count("|") == 6  # the third of april twenty twenty one: seven words
    bad = httpx.post(url + "/v1/completions", json={**body, "date_order": "dym"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "date_order", bad.text


def test_number_and_reads_numbers_with_the_british_and_on_both_apis(url):
    text = "105 in 2005, the 121st"
    assert words(url, text) == "one hundred five in two thousand five the one hundred twenty first".split()
    british = "one hundred and five in two thousand and five the one hundred and twenty first".split()
    assert words(url, text, number_and=True) == british
    body = {"model": "g2p-tiny", "prompt": "105", "max_tokens": 4}
    us = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
    gb = httpx.post(url + "/v1/completions", json={**body, "number_and": True}, timeout=60).json()["choices"][0]["text"]
    assert us.count("|") == 2 and gb.count("|") == 3  # one hundred five; one hundred and five
    bad = httpx.post(url + "/v1/completions", json={**body, "number_and": "often"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "number_and", bad.text
