"""Texts the tokenizers of notebook 12 are trained on and measured with: nothing is downloaded.

* :data:`ARTICLE_1`: Article 1 of the Universal Declaration of Human Rights (1948) in fourteen
  languages and ten scripts -- the same two sentences everywhere, so token counts compare
  languages, not contents. The UN publishes the translations for any use; these were typed in for
  the course from them (a slip would change a count by a token or two, not the comparison).
* :func:`numpy_docs`: NumPy's own docstrings (English prose, parameter tables and ``>>>`` examples),
  a text every installation of the course has, fixed by the pinned NumPy version.
"""

from __future__ import annotations

import inspect

import numpy as np

ARTICLE_1 = {
    "English": "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
               "conscience and should act towards one another in a spirit of brotherhood.",
    "French": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et "
              "de conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "German": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
              "begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
    "Spanish": "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón "
               "y conciencia, deben comportarse fraternalmente los unos con los otros.",
    "Finnish": "Kaikki ihmiset syntyvät vapaina ja tasavertaisina arvoltaan ja oikeuksiltaan. Heille on annettu "
               "järki ja omatunto, ja heidän on toimittava toisiaan kohtaan veljeyden hengessä.",
    "Greek": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα. Είναι "
             "προικισμένοι με λογική και συνείδηση, και οφείλουν να συμπεριφέρονται μεταξύ τους με πνεύμα "
             "αδελφοσύνης.",
    "Russian": "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и "
               "совестью и должны поступать в отношении друг друга в духе братства.",
    "Hebrew": "כל בני האדם נולדו בני חורין ושווים בערכם ובזכויותיהם. כולם חוננו בתבונה ובמצפון, לפיכך חובה עליהם "
              "לנהוג איש ברעהו ברוח של אחוה.",
    "Arabic": "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وهم قد وهبوا العقل والوجدان وعليهم أن يعامل بعضهم "
              "بعضًا بروح الإخاء.",
    "Hindi": "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त है। उन्हें बुद्धि "
             "और अन्तरात्मा की देन प्राप्त है और परस्पर उन्हें भाईचारे के भाव से बर्ताव करना चाहिए।",
    "Thai": "มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักดิ์และสิทธิ ต่างมีเหตุผลและมโนธรรม "
            "และควรปฏิบัติต่อกันด้วยเจตนารมณ์แห่งภราดรภาพ",
    "Chinese": "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心，并应以兄弟关系的精神相对待。",
    "Japanese": "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。人間は、理性と良心とを"
                "授けられており、互いに同胞の精神をもって行動しなければならない。",
    "Korean": "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. 인간은 천부적으로 이성과 양심을 "
              "부여받았으며 서로 형제애의 정신으로 행동하여야 한다.",
}

# NumPy functions whose docstrings make the training text of notebook 12 (about 25,000 characters).
DOC_FUNCTIONS = ("array", "zeros", "arange", "linspace", "reshape", "concatenate", "stack", "where")


def numpy_docs(names=DOC_FUNCTIONS) -> str:
    """The docstrings of NumPy's functions ``names``, joined by blank lines."""
    docs = []
    for name in names:
        if not hasattr(np, name):
            raise ValueError(f"numpy has no function {name!r}")
        docs.append(inspect.getdoc(getattr(np, name)) or "")
    return "\n\n".join(docs)
