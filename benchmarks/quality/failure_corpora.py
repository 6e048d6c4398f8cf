"""Generations with planted failure modes, crossed with prompt topics, for benchmarks/failure_modes.py.

Three corpora, written here (no download): `extract` (JSON extraction, a JSON reference), `triage` (a JSON label
and reason with a JSON Schema and a JSON reference) and `qa` (one-sentence answers, a text reference). Each has five
prompt topics; each topic draws its facts, its prompt and its correct answer from several phrasings. A mode turns
a correct answer into a failing one, again with varied phrasings (prose before the JSON from a dozen openers, loops
of different n-grams and lengths, refusals in several wordings, four other languages, ...). A scenario is one
corpus and one seed: every mode on every topic, a few outputs each, beside correct outputs.
"""

from __future__ import annotations

import json
import random

LANGS = ("fr", "es", "de", "it")
SUMMARY = {
    "en": ["The {x} was reviewed and everything looks consistent with the request.",
           "This {x} needs attention from the team before the end of the week.",
           "Customer reports that the {x} arrived late and asks for an update.",
           "The {x} is complete and no further action is required at this time."],
    "fr": ["Le {x} a été vérifié et tout semble conforme à la demande.",
           "Ce {x} demande l'attention de l'équipe avant la fin de la semaine.",
           "Le client signale que le {x} est arrivé en retard et demande des nouvelles.",
           "Le {x} est terminé et aucune autre action n'est nécessaire pour le moment."],
    "es": ["El {x} fue revisado y todo parece coherente con la solicitud.",
           "Este {x} necesita la atención del equipo antes del fin de semana.",
           "El cliente informa que el {x} llegó tarde y pide una actualización.",
           "El {x} está completo y no se requiere ninguna otra acción por ahora."],
    "de": ["Der {x} wurde geprüft und alles scheint mit der Anfrage übereinzustimmen.",
           "Dieser {x} braucht die Aufmerksamkeit des Teams vor dem Ende der Woche.",
           "Der Kunde meldet, dass der {x} zu spät angekommen ist, und bittet um ein Update.",
           "Der {x} ist abgeschlossen und im Moment ist keine weitere Aktion nötig."],
    "it": ["Il {x} è stato controllato e tutto sembra coerente con la richiesta.",
           "Questo {x} richiede l'attenzione del team prima della fine della settimana.",
           "Il cliente segnala che il {x} è arrivato in ritardo e chiede un aggiornamento.",
           "Il {x} è completo e al momento non serve nessun'altra azione."],
}
NAMES = ["Alice Martin", "Bob Chen", "Carla Diaz", "Dev Patel", "Erin Walsh", "Farid Haddad", "Grace Kim",
         "Hugo Silva", "Ines Novak", "Jonas Berg"]


def _extract_topics():
    def invoice(r):
        return {"invoice_number": f"INV-{r.randint(1000, 9999)}", "customer": r.choice(NAMES),
                "total": round(r.uniform(20, 900), 2), "currency": r.choice(["USD", "EUR", "GBP"])}, "invoice"

    def bug(r):
        return {"component": r.choice(["login", "payments", "search", "upload", "sync"]),
                "severity": r.choice(["low", "medium", "high", "critical"]),
                "reporter": r.choice(NAMES), "version": f"{r.randint(1, 5)}.{r.randint(0, 9)}"}, "bug report"

    def job(r):
        return {"title": r.choice(["data engineer", "nurse", "chef", "accountant", "electrician"]),
                "city": r.choice(["Lisbon", "Denver", "Osaka", "Nairobi", "Oslo"]),
                "salary": r.randint(30, 150) * 1000, "remote": r.choice([True, False])}, "job posting"

    def flight(r):
        return {"passenger": r.choice(NAMES), "origin": r.choice(["JFK", "LHR", "CDG", "NRT", "SYD"]),
                "destination": r.choice(["SFO", "FRA", "DXB", "SIN", "GRU"]),
                "seats": r.randint(1, 4)}, "flight booking"

    def recipe(r):
        return {"dish": r.choice(["lentil soup", "pad thai", "banana bread", "ratatouille", "paella"]),
                "servings": r.randint(2, 8), "minutes": r.choice([20, 30, 45, 60, 90]),
                "vegetarian": r.choice([True, False])}, "recipe"

    return {"invoices": invoice, "bug triage": bug, "job postings": job, "flight bookings": flight, "recipes": recipe}


EXTRACT_PROMPTS = [
    "Extract the fields of this {x} as a JSON object with keys {keys}.\n\n{text}",
    "Read the {x} below and return only JSON ({keys}).\n{text}",
    "You are a data-entry assistant. Turn the following {x} into JSON with the fields {keys}.\n---\n{text}\n---",
    "{text}\n\nFrom the {x} above, output a JSON object containing {keys}. No commentary.",
]


def _describe(fields: dict, r: random.Random) -> str:
    parts = [f"{k.replace('_', ' ')}: {v}" for k, v in fields.items()]
    r.shuffle(parts)
    joiner = r.choice(["; ", ". ", "\n", ", "])
    return joiner.join(parts)


TRIAGE_TOPICS = {
    "billing": ["I was charged twice for my subscription this month", "My invoice shows the wrong tax amount",
                "The refund for my cancelled plan never arrived", "Why did my card get declined at renewal"],
    "login": ["I cannot sign in after resetting my password", "The two-factor code never arrives by text",
              "My account got locked after three attempts", "Single sign-on redirects me to a blank page"],
    "shipping": ["My parcel has been stuck in transit for ten days", "The courier left the box at the wrong address",
                 "Tracking says delivered but nothing arrived", "The package arrived damaged and wet"],
    "app crashes": ["The app closes as soon as I open the camera", "It crashes every time I upload a photo",
                    "After the update the app freezes on the splash screen", "The widget crashes my phone's home screen"],
    "privacy": ["Please delete all the data you hold about me", "Who can see my location history",
                "I want to export my personal data", "Stop sharing my email with partners"],
}
TRIAGE_LABELS = {"billing": "billing", "login": "account", "shipping": "delivery", "app crashes": "bug",
                 "privacy": "privacy"}
TRIAGE_PROMPTS = [
    "Classify this support ticket. Answer with JSON {{\"label\": ..., \"priority\": ..., \"reason\": ...}}.\n"
    "Ticket: {text}",
    "Support ticket:\n{text}\n\nReturn a JSON object with label, priority and a one-sentence reason.",
    "Triage the customer message below into label/priority/reason (JSON only).\n> {text}",
]
TRIAGE_SCHEMA = {"type": "object", "required": ["label", "priority", "reason"], "additionalProperties": False,
                 "properties": {"label": {"type": "string"}, "priority": {"enum": ["low", "normal", "urgent"]},
                                "reason": {"type": "string"}}}

QA_TOPICS = {
    "capitals": [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
                 ("Canada", "Ottawa"), ("Norway", "Oslo")],
    "authors": [("Pride and Prejudice", "Jane Austen"), ("War and Peace", "Leo Tolstoy"),
                ("Beloved", "Toni Morrison"), ("Dracula", "Bram Stoker"), ("Emma", "Jane Austen"),
                ("Ulysses", "James Joyce")],
    "chemistry": [("gold", "Au"), ("iron", "Fe"), ("sodium", "Na"), ("silver", "Ag"), ("lead", "Pb"),
                  ("tin", "Sn")],
    "inventions": [("the telephone", "Alexander Graham Bell"), ("the light bulb", "Thomas Edison"),
                   ("the World Wide Web", "Tim Berners-Lee"), ("dynamite", "Alfred Nobel"),
                   ("the printing press", "Johannes Gutenberg"), ("the radio", "Guglielmo Marconi")],
    "rivers": [("Egypt", "the Nile"), ("Brazil", "the Amazon"), ("Germany", "the Rhine"), ("China", "the Yangtze"),
               ("England", "the Thames"), ("Iraq", "the Tigris")],
}
QA_QUESTION = {"capitals": "What is the capital of {a}?", "authors": "Who wrote {a}?",
               "chemistry": "What is the chemical symbol of {a}?", "inventions": "Who invented {a}?",
               "rivers": "Which major river flows through {a}?"}
QA_ANSWER = {
    "en": {"capitals": "The capital of {a} is {b}.", "authors": "{a} was written by {b}.",
           "chemistry": "The chemical symbol of {a} is {b}.", "inventions": "{a} was invented by {b}.",
           "rivers": "The main river flowing through {a} is {b}."},
    "fr": {"capitals": "La capitale de ce pays, {a}, est la ville de {b}.", "authors": "Le livre {a} a été écrit par {b}.",
           "chemistry": "Le symbole chimique de cet élément est {b}, voilà la réponse.",
           "inventions": "Cette invention est due à {b}, selon les livres d'histoire.",
           "rivers": "Le grand fleuve qui traverse ce pays est {b}, bien entendu."},
    "es": {"capitals": "La capital de este país, {a}, es la ciudad de {b}.", "authors": "El libro {a} fue escrito por {b}.",
           "chemistry": "El símbolo químico de este elemento es {b}, esa es la respuesta.",
           "inventions": "Este invento se debe a {b}, según los libros de historia.",
           "rivers": "El gran río que atraviesa este país es {b}, por supuesto."},
    "de": {"capitals": "Die Hauptstadt dieses Landes, {a}, ist die Stadt {b}.", "authors": "Das Buch {a} wurde von {b} geschrieben.",
           "chemistry": "Das chemische Symbol dieses Elements ist {b}, das ist die Antwort.",
           "inventions": "Diese Erfindung stammt von {b}, laut den Geschichtsbüchern.",
           "rivers": "Der große Fluss, der durch dieses Land fließt, ist {b}, natürlich."},
    "it": {"capitals": "La capitale di questo paese, {a}, è la città di {b}.", "authors": "Il libro {a} è stato scritto da {b}.",
           "chemistry": "Il simbolo chimico di questo elemento è {b}, questa è la risposta.",
           "inventions": "Questa invenzione si deve a {b}, secondo i libri di storia.",
           "rivers": "Il grande fiume che attraversa questo paese è {b}, naturalmente."},
}
QA_PROMPTS = ["{q} Answer in one sentence.", "Question: {q}\nReply with a single complete sentence.",
              "Please answer briefly, in a full sentence: {q}", "{q}"]

OPENERS = ["Sure! Here is the JSON you asked for:", "Here's the extracted data:", "Of course. Based on the text,",
           "Certainly, I have analysed the input.", "Below is the result.", "Great question! The answer is:",
           "I parsed the message and found the following.", "Okay, here you go:", "Let me think step by step.",
           "After reviewing the content carefully, here is my output:", "Answer:", "Result follows."]
CLOSERS = ["Let me know if you need anything else!", "I hope this helps.", "Note: some values were inferred.",
           "Feel free to ask for changes.", "This is based only on the text provided.", "Cheers!",
           "Please double-check the numbers before using them.", "Is there anything else I can do?"]
REFUSALS = ["I'm sorry, but I can't help with that request.", "I am unable to assist with this.",
            "As an AI language model, I cannot process personal information like this.",
            "I'm afraid I cannot provide that information.", "Sorry, I won't be able to do that.",
            "I must decline to answer this request because it may contain private data.",
            "I can't comply with this request.", "Unfortunately I'm not able to help with that one.",
            # phrasings the refusal patterns do not know: the embedding has to place them
            "That is not something I am permitted to do.", "Sorry, this kind of request is off-limits for me.",
            "This task goes beyond what I may do, sorry."]
LOOPS = ["I think", "the answer is", "\"items\": [", "and then", "Let me check again.", "{", "ok", "the the",
         "Processing...", "value value"]


def _loop(r: random.Random) -> str:
    unit = r.choice(LOOPS)
    start = r.choice(["", "Here is the answer: ", "{\"a\": ", "Sure. "])
    return start + " ".join([unit] * r.randint(12, 40))


def _rename(fields: dict, r: random.Random) -> dict:
    key = r.choice(list(fields))
    variants = [key.upper(), key.replace("_", "") + "_value", "".join(w.title() for w in key.split("_")),
                key[:3] + "_" + key[-2:] if len(key) > 5 else key + "_name", "the_" + key]
    new = r.choice(variants)
    return {(new if k == key else k): v for k, v in fields.items()}


def _wrong_value(fields: dict, r: random.Random) -> dict:
    out = dict(fields)
    key = r.choice([k for k in fields if k not in ("summary", "reason")])
    v = out[key]
    if isinstance(v, bool):
        out[key] = not v
    elif isinstance(v, (int, float)):
        out[key] = round(v * r.choice([0.5, 1.5, 2, 10]) + 1, 2)
    else:
        out[key] = r.choice(["unknown", "N/A", "other", v[::-1], str(v).upper() + " X"])
    return out


def json_modes(fields: dict, r: random.Random, text_key: str) -> dict:
    """mode -> (output, stop_reason) for a JSON answer `fields` (its `text_key` holds a sentence)."""
    good = json.dumps(fields, ensure_ascii=False, indent=r.choice([None, 2]))
    lang = r.choice(LANGS)
    translated = {**fields, text_key: r.choice(SUMMARY[lang]).format(x=r.choice(["dossier", "ticket", "item"]))}
    cut = good[: r.randint(max(8, len(good) // 4), max(9, len(good) - 8))]
    missing = dict(fields)
    missing.pop(r.choice([k for k in fields if k != text_key]))
    return {
        "prose before the JSON": (f"{r.choice(OPENERS)}\n{good}", "stop"),
        "prose after the JSON": (f"{good}\n\n{r.choice(CLOSERS)}", "stop"),
        "code fence": (f"```{r.choice(['json', '', 'JSON'])}\n{good}\n```", "stop"),
        "cut off at max tokens": (cut, "length"),
        "renamed key": (json.dumps(_rename(fields, r), ensure_ascii=False), "stop"),
        "missing field": (json.dumps(missing, ensure_ascii=False), "stop"),
        "wrong value": (json.dumps(_wrong_value(fields, r), ensure_ascii=False), "stop"),
        "refusal": (r.choice(REFUSALS), "stop"),
        "repetition loop": (_loop(r), "length"),
        "wrong language": (json.dumps(translated, ensure_ascii=False), "stop"),
        "empty": (r.choice(["", " ", "\n"]), "stop"),
    }


def _row(prompt, output, reference, stop, mode, topic, **extra):
    return {"prompt": prompt, "output": output, "reference": reference, "stop_reason": stop, "mode": mode,
            "topic": topic, **extra}


def extract_rows(r: random.Random, per_mode: tuple[int, int], n_clean: int) -> list[dict]:
    rows = []
    for topic, make in _extract_topics().items():
        for i in range(n_clean + 11 * per_mode[1]):
            fields, noun = make(r)
            fields["summary"] = r.choice(SUMMARY["en"]).format(x=noun)
            prompt = r.choice(EXTRACT_PROMPTS).format(x=noun, keys=", ".join(fields), text=_describe(fields, r))
            reference = json.dumps(fields, ensure_ascii=False)
            if i < n_clean:
                rows.append(_row(prompt, json.dumps(fields, ensure_ascii=False), reference, "stop", "", topic))
                continue
            modes = json_modes(fields, r, "summary")
            mode = list(modes)[(i - n_clean) % len(modes)]
            rows.append(_row(prompt, *modes[mode][:1], reference, modes[mode][1], mode, topic))
    return _thin(rows, r, per_mode)


def triage_rows(r: random.Random, per_mode: tuple[int, int], n_clean: int) -> list[dict]:
    rows = []
    for topic, texts in TRIAGE_TOPICS.items():
        for i in range(n_clean + 11 * per_mode[1]):
            text = r.choice(texts) + r.choice([".", "!", "?", ". Please help.", " - thanks."])
            answer = {"label": TRIAGE_LABELS[topic], "priority": r.choice(["low", "normal", "urgent"]),
                      "reason": r.choice(SUMMARY["en"]).format(x=r.choice(["ticket", "request", "case"]))}
            prompt = r.choice(TRIAGE_PROMPTS).format(text=text)
            reference = json.dumps(answer)
            extra = {"schema": json.dumps(TRIAGE_SCHEMA)}
            if i < n_clean:
                rows.append(_row(prompt, json.dumps(answer), reference, "stop", "", topic, **extra))
                continue
            modes = json_modes(answer, r, "reason")
            mode = list(modes)[(i - n_clean) % len(modes)]
            rows.append(_row(prompt, modes[mode][0], reference, modes[mode][1], mode, topic, **extra))
    return _thin(rows, r, per_mode)


def qa_rows(r: random.Random, per_mode: tuple[int, int], n_clean: int) -> list[dict]:
    rows = []
    for topic, facts in QA_TOPICS.items():
        for i in range(n_clean + 7 * per_mode[1]):
            a, b = r.choice(facts)
            prompt = r.choice(QA_PROMPTS).format(q=QA_QUESTION[topic].format(a=a))
            answer = QA_ANSWER["en"][topic].format(a=a, b=b)
            answer = answer[0].upper() + answer[1:]
            if i < n_clean:
                rows.append(_row(prompt, answer, answer, "stop", "", topic))
                continue
            other = r.choice([f for f in facts if f[1] != b])[1]
            lang = r.choice(LANGS)
            modes = {
                "wrong answer": (QA_ANSWER["en"][topic].format(a=a, b=other), "stop"),
                "refusal": (r.choice(REFUSALS), "stop"),
                "repetition loop": (_loop(r), "length"),
                "wrong language": (QA_ANSWER[lang][topic].format(a=a, b=b), "stop"),
                "cut off at max tokens": (answer[: r.randint(5, max(6, len(answer) // 2))], "length"),
                "rambling": (f"{r.choice(OPENERS)} {answer} {r.choice(CLOSERS)}", "stop"),
                "empty": (r.choice(["", " "]), "stop"),
            }
            mode = list(modes)[(i - n_clean) % len(modes)]
            rows.append(_row(prompt, modes[mode][0], answer, modes[mode][1], mode, topic))
    return _thin(rows, r, per_mode)


def _thin(rows: list[dict], r: random.Random, per_mode: tuple[int, int]) -> list[dict]:
    """Keep a random number (per_mode) of each (mode, topic) cell, so modes and topics are unbalanced."""
    keep, cells = [], {}
    for row in rows:
        cells.setdefault((row["mode"], row["topic"]), []).append(row)
    for (mode, _), members in cells.items():
        k = len(members) if not mode else r.randint(*per_mode)
        keep += members[:k]
    r.shuffle(keep)
    for i, row in enumerate(keep):
        row["id"] = f"r{i}"
    return keep


CORPORA = {"extract": extract_rows, "triage": triage_rows, "qa": qa_rows}


def scenario(corpus: str, seed: int, per_mode=(2, 7), n_clean: int = 12) -> list[dict]:
    """One corpus at one seed: rows with prompt, output, reference (and schema), stop_reason, mode, topic, id."""
    return CORPORA[corpus](random.Random(f"{corpus}-{seed}"), per_mode, n_clean)
