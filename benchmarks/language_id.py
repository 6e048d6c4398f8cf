"""Language identification on short texts: py3langid against lingua-language-detector (both ship their models in
the wheel, both work offline). The `language` output check needs to tell the language of an LLM's answer, often a
sentence or two, from the prompt's or the reference's.

The texts are written here (ten short answers a language in eight languages, 2 to 14 words), so the measurement
depends on no download. Accuracy is by length in words; time is per text, after a warm-up.

    .venv/bin/python benchmarks/language_id.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXTS = {
    "en": ["The invoice total is wrong.", "Please restart the server and try again.",
           "I think the answer is four hundred dollars.", "The customer asked for a refund yesterday.",
           "This bug happens when the user logs out.", "Sure, here is the summary you asked for.",
           "The meeting was moved to next Tuesday afternoon.", "It rained all week in the north of the country.",
           "Our team fixed the crash in the latest release.", "Thanks!"],
    "fr": ["Le total de la facture est faux.", "Veuillez redémarrer le serveur et réessayer.",
           "Je pense que la réponse est quatre cents dollars.", "Le client a demandé un remboursement hier.",
           "Ce bogue arrive quand l'utilisateur se déconnecte.", "Bien sûr, voici le résumé que vous avez demandé.",
           "La réunion a été déplacée à mardi prochain.", "Il a plu toute la semaine dans le nord du pays.",
           "Notre équipe a corrigé le plantage dans la dernière version.", "Merci beaucoup !"],
    "de": ["Die Rechnungssumme ist falsch.", "Bitte starten Sie den Server neu und versuchen Sie es erneut.",
           "Ich glaube, die Antwort ist vierhundert Dollar.", "Der Kunde hat gestern eine Rückerstattung verlangt.",
           "Dieser Fehler tritt auf, wenn sich der Benutzer abmeldet.", "Natürlich, hier ist die Zusammenfassung.",
           "Das Treffen wurde auf nächsten Dienstag verschoben.", "Im Norden des Landes hat es die ganze Woche geregnet.",
           "Unser Team hat den Absturz in der neuesten Version behoben.", "Vielen Dank!"],
    "es": ["El total de la factura es incorrecto.", "Por favor reinicie el servidor e inténtelo de nuevo.",
           "Creo que la respuesta es cuatrocientos dólares.", "El cliente pidió un reembolso ayer.",
           "Este error ocurre cuando el usuario cierra la sesión.", "Claro, aquí está el resumen que pediste.",
           "La reunión se movió al próximo martes por la tarde.", "Llovió toda la semana en el norte del país.",
           "Nuestro equipo corrigió el fallo en la última versión.", "¡Muchas gracias!"],
    "it": ["Il totale della fattura è sbagliato.", "Per favore riavvia il server e riprova.",
           "Penso che la risposta sia quattrocento dollari.", "Il cliente ha chiesto un rimborso ieri.",
           "Questo errore succede quando l'utente si disconnette.", "Certo, ecco il riassunto che hai chiesto.",
           "La riunione è stata spostata a martedì prossimo.", "Ha piovuto tutta la settimana nel nord del paese.",
           "Il nostro team ha risolto il crash nell'ultima versione.", "Grazie mille!"],
    "pt": ["O total da fatura está errado.", "Por favor reinicie o servidor e tente novamente.",
           "Acho que a resposta é quatrocentos dólares.", "O cliente pediu um reembolso ontem.",
           "Este erro acontece quando o usuário sai da conta.", "Claro, aqui está o resumo que você pediu.",
           "A reunião foi adiada para a próxima terça-feira.", "Choveu a semana toda no norte do país.",
           "Nossa equipe corrigiu a falha na versão mais recente.", "Muito obrigado!"],
    "nl": ["Het totaal van de factuur klopt niet.", "Start de server opnieuw op en probeer het nog eens.",
           "Ik denk dat het antwoord vierhonderd dollar is.", "De klant vroeg gisteren om terugbetaling.",
           "Deze fout treedt op wanneer de gebruiker uitlogt.", "Natuurlijk, hier is de samenvatting die je vroeg.",
           "De vergadering is verplaatst naar volgende dinsdag.", "Het regende de hele week in het noorden van het land.",
           "Ons team heeft de crash in de nieuwste versie opgelost.", "Hartelijk dank!"],
    "ru": ["Сумма в счёте неверна.", "Пожалуйста, перезапустите сервер и попробуйте снова.",
           "Я думаю, ответ четыреста долларов.", "Клиент вчера попросил вернуть деньги.",
           "Эта ошибка возникает, когда пользователь выходит.", "Конечно, вот краткое изложение, которое вы просили.",
           "Встречу перенесли на следующий вторник.", "Всю неделю на севере страны шёл дождь.",
           "Наша команда исправила сбой в последней версии.", "Большое спасибо!"],
}


def py3langid_detector():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return lambda text: identifier.classify(text)[0]


def lingua_detector():
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().build()

    def detect(text):
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found is not None else "?"

    return detect


def measure(name: str, make) -> list:
    start = time.perf_counter()
    detect = make()
    load = time.perf_counter() - start
    detect("warm up the model")
    by_len = {"1-3 words": [0, 0], "4-7 words": [0, 0], "8+ words": [0, 0]}
    start = time.perf_counter()
    n = 0
    for lang, texts in TEXTS.items():
        for text in texts:
            words = len(text.split())
            bucket = "1-3 words" if words <= 3 else "4-7 words" if words <= 7 else "8+ words"
            by_len[bucket][0] += detect(text) == lang
            by_len[bucket][1] += 1
            n += 1
    per_text = (time.perf_counter() - start) / n * 1000
    total = sum(v[0] for v in by_len.values()) / n
    return [name, f"{total:.3f}", *(f"{v[0] / v[1]:.2f} ({v[1]})" for v in by_len.values()),
            f"{per_text:.2f}", f"{load:.1f}"]


def main() -> None:
    from common import table

    rows = [measure("py3langid 0.4 (all 97 languages)", py3langid_detector),
            measure("lingua 2.1 (all 75 languages, high accuracy)", lingua_detector)]
    print(f"{sum(len(t) for t in TEXTS.values())} short texts in {len(TEXTS)} languages")
    print(table(rows, ["detector", "accuracy", "1-3 words", "4-7 words", "8+ words", "ms/text", "load s"]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
